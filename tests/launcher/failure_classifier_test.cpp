#include <doctest/doctest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "ddprun/launch_config.hpp"
#include "report/failure_classifier.hpp"

using namespace ddprun;
using launcher::FailureEvidence;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

FailureEvidence exited(int code, const std::string& stderr_text = "") {
  FailureEvidence e;
  e.exit_code = code;
  e.stderr_tail = lines_of(stderr_text);
  return e;
}

FailureEvidence signalled(int signal, std::optional<long long> oom_kills = std::nullopt,
                          std::optional<long long> kernel_oom_kills = std::nullopt) {
  FailureEvidence e;
  e.exit_code = 128 + signal;
  e.signal = signal;
  e.signal_from_outside = true;
  e.oom_kills = oom_kills;
  e.kernel_oom_kills = kernel_oom_kills;
  return e;
}

const std::string kTraceback =
    "Traceback (most recent call last):\n"
    "  File \"/job/train.py\", line 40, in <module>\n"
    "    main()\n"
    "  File \"/job/train.py\", line 12, in main\n"
    "    x = 1 / 0\n";

}  // namespace

TEST_CASE("failure kinds: the rules table") {
  FailureEvidence after_failure_reset = exited(1, kTraceback + "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4321");
  after_failure_reset.after_another_failure = true;
  FailureEvidence reset_first = after_failure_reset;
  reset_first.after_another_failure = false;
  FailureEvidence stopped = exited(1, "");
  stopped.after_another_failure = true;
  stopped.stopped_by_ddprun = true;
  FailureEvidence hung = exited(124);
  hung.hung = true;
  hung.error_message = "no heartbeat for 31.0 s (--hang_timeout=30)";
  FailureEvidence import_with_interpreter = exited(1, kTraceback + "ModuleNotFoundError: No module named 'tqdm'");
  import_with_interpreter.error_message =
      "ModuleNotFoundError: No module named 'tqdm' (ran under /usr/bin/python3, the first python3 in PATH; set "
      "PYTHON_EXEC to choose another)";
  FailureEvidence record_only = exited(1);
  record_only.error_message = "ValueError: bad batch";
  record_only.traceback = kTraceback + "ValueError: bad batch\n";
  FailureEvidence oom_peak = signalled(SIGKILL, 1);
  oom_peak.memory_peak = 2LL << 30;

  struct Row {
    const char* name;
    FailureEvidence evidence;
    const char* kind;
    bool retryable;
    const char* cause;  // a part of it
  };
  const std::vector<Row> table = {
      {"SyntaxError of the main script", exited(1, "  File \"/job/broken.py\", line 3\n    def f(:\n          ^\nSyntaxError: invalid syntax"),
       "syntax_error", false, "SyntaxError: invalid syntax"},
      {"IndentationError", exited(1, "  File \"/job/b.py\", line 2\n    x\nIndentationError: unexpected indent"),
       "syntax_error", false, "IndentationError"},
      {"module not found, with the interpreter", import_with_interpreter, "import_error", false, "ran under /usr/bin/python3"},
      {"ImportError from stderr", exited(1, kTraceback + "ImportError: cannot import name 'x' from 'y'"), "import_error", false,
       "ImportError: cannot import name"},
      {"plain Python exception", exited(1, kTraceback + "ZeroDivisionError: division by zero"), "python_exception", true,
       "ZeroDivisionError: division by zero"},
      {"only the error file", record_only, "python_exception", true, "ValueError: bad batch"},
      {"PyTorch 2 rank prefixes", exited(1, "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"/a.py\", line 5, in <module>\n[rank1]: KeyError: 'lr'"),
       "python_exception", true, "KeyError: 'lr'"},
      {"CUDA OOM, torch 1.13", exited(1, kTraceback + "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.11 GiB total capacity)"),
       "cuda_oom", true, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB"},
      {"CUDA OOM, torch 2", exited(1, kTraceback + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB"),
       "cuda_oom", true, "torch.OutOfMemoryError"},
      {"CUDA OOM from C++, then abort", [] { auto e = signalled(SIGABRT); e.stderr_tail = {"terminate called after throwing an instance of 'c10::OutOfMemoryError'", "  what():  CUDA out of memory."}; return e; }(),
       "cuda_oom", true, "CUDA out of memory."},
      {"NCCL error", exited(1, kTraceback + "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error"),
       "nccl_error", true, "DistBackendError"},
      {"CUDA error", exited(1, kTraceback + "RuntimeError: CUDA error: an illegal memory access was encountered"),
       "cuda_error", true, "CUDA error: an illegal memory access was encountered"},
      {"CUDA error from C++, then abort", [] { auto e = signalled(SIGABRT); e.stderr_tail = {"terminate called after throwing an instance of 'c10::Error'", "  what():  CUDA error: unspecified launch failure"}; return e; }(),
       "cuda_error", true, "CUDA error: unspecified launch failure"},
      {"NCCL watchdog timeout", signalled(SIGABRT), "abort", true, "SIGABRT"},
      {"NCCL watchdog timeout text", [] { auto e = signalled(SIGABRT); e.stderr_tail = {"[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out."}; return e; }(),
       "nccl_error", true, "Watchdog caught collective operation timeout"},
      {"gloo timeout", exited(1, kTraceback + "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:84] Timed out waiting 1800000ms for recv operation to complete"),
       "collective_timeout", true, "Timed out waiting 1800000ms"},
      {"worker library timeout", exited(1, "ddprun: all_reduce timed out on rank 1 of 2 after 30.0 s (collective timeout 30 s): a peer is hung"),
       "collective_timeout", true, "timed out on rank 1 of 2"},
      {"SIGSEGV", signalled(SIGSEGV), "segfault", true, "SIGSEGV"},
      {"SIGBUS", signalled(SIGBUS), "segfault", true, "SIGBUS"},
      {"SIGFPE", signalled(SIGFPE), "segfault", true, "SIGFPE"},
      {"SIGILL", signalled(SIGILL), "segfault", true, "SIGILL"},
      {"SIGABRT", signalled(SIGABRT), "abort", true, "SIGABRT"},
      {"OOM kill seen in memory.events", oom_peak, "host_oom", true, "oom_kill +1 in the workers' cgroup, memory.peak 2.0 GiB"},
      {"SIGKILL without a cgroup, the kernel's count unknown", signalled(SIGKILL), "host_oom", true,
       "probably the out-of-memory killer (no cgroup to tell for certain"},
      // Without a cgroup, the kernel's own count (/proc/vmstat) tells an outside kill from the OOM killer's.
      {"SIGKILL without a cgroup, no OOM kill on the host", signalled(SIGKILL, std::nullopt, 0), "killed", true,
       "not the out-of-memory killer: the kernel counted no OOM kill during the round"},
      {"SIGKILL without a cgroup, 2 OOM kills on the host", signalled(SIGKILL, std::nullopt, 2), "host_oom", true,
       "the kernel counted 2 OOM kills on this host during the round"},
      {"SIGKILL with a cgroup, no OOM kill there, some elsewhere", signalled(SIGKILL, 0, 3), "killed", true,
       "not the out-of-memory killer: memory.events has no new oom_kill"},
      {"SIGKILL with a cgroup, no OOM kill", signalled(SIGKILL, 0), "killed", true, "not the out-of-memory killer"},
      {"SIGTERM from outside", signalled(SIGTERM), "killed", true, "SIGTERM (Terminated) from outside ddprun"},
      {"hung", hung, "hang", true, "no heartbeat for 31.0 s"},
      {"peer closed after another failure", after_failure_reset, "consequence", true, "Connection closed by peer"},
      {"peer closed first: not a consequence", reset_first, "python_exception", true, "RuntimeError"},
      {"failed while ddprun stopped it", stopped, "consequence", true, "while ddprun stopped it"},
      {"plain exit code, last stderr line", exited(3, "loading data\nno shard for rank 3"), "exit_code", true, "exit code 3: no shard for rank 3"},
      {"plain exit code", exited(2), "exit_code", true, "exit code 2"},
      {"exception-looking line without frames", exited(1, "ValueError: printed, not raised"), "exit_code", true, "exit code 1: ValueError"},
  };
  for (const Row& row : table) {
    const std::string name = row.name;
    CAPTURE(name);
    const auto c = launcher::classify_failure(row.evidence, {});
    CAPTURE(c.cause);
    CHECK(c.kind.name() == row.kind);
    CHECK(c.retryable == row.retryable);
    CHECK(c.cause.find(row.cause) != std::string::npos);
    CHECK(c.cause.find('\n') == std::string::npos);
  }
}

TEST_CASE("failure kinds: exception type and location, for 'the same exception twice'") {
  const auto c = launcher::classify_failure(exited(1, kTraceback + "ZeroDivisionError: division by zero"), {});
  CHECK(c.exception == "ZeroDivisionError");
  CHECK(c.location == "/job/train.py:12");
  const auto chained = launcher::find_python_error(lines_of(
      kTraceback + "KeyError: 1\n\nDuring handling of the above exception, another exception occurred:\n\n"
                   "Traceback (most recent call last):\n  File \"/job/b.py\", line 7, in f\nValueError: again"));
  REQUIRE(chained);
  CHECK(chained->type == "ValueError");
  CHECK(chained->location == "/job/b.py:7");
  CHECK_FALSE(launcher::find_python_error({"RuntimeError: no frame before me"}));
}

TEST_CASE("failure kinds: the user's rules come first") {
  const auto rules = config::parse_failure_rules(
      R"([{"pattern": "ECC error|Xid 79", "kind": "gpu_fault", "retryable": true},
          {"pattern": "^ValueError: bad config", "kind": "config_error", "retryable": false}])");
  auto c = launcher::classify_failure(exited(1, "NCCL WARN Cuda failure 'uncorrectable ECC error encountered'"), rules);
  CHECK(c.kind.name() == "gpu_fault");
  CHECK(c.retryable);
  CHECK(c.rule == "ECC error|Xid 79");
  c = launcher::classify_failure(exited(1, kTraceback + "ValueError: bad config: lr=-1"), rules);
  CHECK(c.kind.name() == "config_error");
  CHECK_FALSE(c.retryable);
  CHECK(c.exception == "ValueError");
  c = launcher::classify_failure(exited(1, kTraceback + "ValueError: other"), rules);
  CHECK(c.kind.name() == "python_exception");
}

TEST_CASE("failure kinds: --failure_rules is checked") {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"{}", "is not an array"},
      {"[1]", "rule 0: not an object"},
      {R"([{"pattern": "(", "kind": "x", "retryable": true}])", "rule 0: \"pattern\""},
      {R"([{"pattern": "a", "kind": "Bad Kind", "retryable": true}])", "\"kind\" must be"},
      {R"([{"pattern": "a", "kind": "k"}])", "\"retryable\" must be true or false"},
      {R"([{"pattern": "a", "kind": "k", "retryable": true, "extra": 1}])", "unknown key \"extra\""},
      {"not json", "is not valid JSON"},
  };
  for (const auto& row : bad) {
    // Not a structured binding: CAPTURE's lambda cannot capture one in C++17 (clang refuses).
    const char* text = row.first;
    const char* message = row.second;
    CAPTURE(text);
    try {
      config::parse_failure_rules(text);
      FAIL("accepted");
    } catch (const config::UsageError& e) {
      const std::string what = e.what();
      CHECK(what.rfind("--failure_rules: ", 0) == 0);
      CHECK(what.find(message) != std::string::npos);
    }
  }
  CHECK(config::parse_failure_rules("").empty());
  CHECK(config::parse_failure_rules("[]").empty());
}

