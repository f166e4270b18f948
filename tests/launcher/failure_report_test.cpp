#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "report/failure_report.hpp"

using namespace ddprun;

TEST_CASE("error files in PyTorch's @record format") {
  const std::string path = "/tmp/ddprun_error_file_test_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "Traceback...", "timestamp": "1700000000"}}})";
  auto contents = launcher::read_error_file(path);
  REQUIRE(contents);
  CHECK(contents->message == "ValueError: bad batch");
  CHECK(contents->traceback == "Traceback...");
  CHECK(contents->timestamp == 1700000000.0);

  std::ofstream(path) << R"({"message": "plain text"})";
  contents = launcher::read_error_file(path);
  REQUIRE(contents);
  CHECK(contents->message == "plain text");

  std::ofstream(path) << "not json";
  CHECK_FALSE(launcher::read_error_file(path));
  ::unlink(path.c_str());
  CHECK_FALSE(launcher::read_error_file(path));
}

TEST_CASE("failure summary: root cause first, with hints") {
  elastic::JobOutcome outcome;
  outcome.exit_code = 137;
  outcome.restarts = 2;
  elastic::WorkerFailure oom;
  oom.rank = 3;
  oom.local_rank = 1;
  oom.host = "node1";
  oom.pid = 4242;
  oom.exit_code = 137;
  oom.signal = SIGKILL;
  oom.signal_from_outside = true;
  elastic::WorkerFailure other;
  other.rank = 0;
  other.local_rank = 0;
  other.host = "node0";
  other.pid = 17;
  other.exit_code = 1;
  other.message = "RuntimeError: Connection closed by peer\nmore";
  outcome.failures = {oom, other};
  const std::string text = launcher::format_failure_summary(outcome, "train");
  CHECK(text ==
        "ddprun: train failed (exit code 137) after 2 restarts\n"
        "  root cause: rank 3 (local rank 1) on node1, pid 4242: killed by SIGKILL (exit code 137), "
        "not sent by ddprun: killed from outside, often the out-of-memory killer (check dmesg)\n"
        "  also failed: rank 0 (local rank 0) on node0, pid 17: exit code 1: RuntimeError: Connection closed by peer\n");
}

namespace {

// A Python worker's @record error file, as PyTorch writes it.
const char* const kRecordedError = R"({"message": {"message": "ValueError: bad shard 17", "extraInfo": {
  "py_callstack": "Traceback (most recent call last):\n  File \"/job/train.py\", line 12, in main\n    load(shard)\n  File \"/job/train.py\", line 7, in load\n    raise ValueError(f\"bad shard {n}\")\nValueError: bad shard 17\n",
  "timestamp": "1700000000"}}})";

elastic::WorkerFailure python_failure() {
  elastic::WorkerFailure f;
  f.rank = 1;
  f.local_rank = 1;
  f.host = "node0";
  f.pid = 99;
  f.exit_code = 1;
  return f;
}

std::string summary_of(const elastic::WorkerFailure& root) {
  elastic::JobOutcome outcome;
  outcome.exit_code = root.exit_code;
  outcome.failures = {root};
  return launcher::format_failure_summary(outcome, "train.py");
}

}  // namespace

TEST_CASE("failure summary: the message, then the traceback indented under it") {
  elastic::WorkerFailure root = python_failure();
  root.message = "ValueError: bad shard 17";
  root.traceback = launcher::traceback_tail(
      "Traceback (most recent call last):\n  File \"/job/train.py\", line 7, in load\n    raise ValueError(n)\n"
      "ValueError: bad shard 17\n");
  CHECK(summary_of(root) ==
        "ddprun: train.py failed (exit code 1) after 0 restarts\n"
        "  root cause: rank 1 (local rank 1) on node0, pid 99: exit code 1\n"
        "    error: ValueError: bad shard 17\n"
        "    traceback:\n"
        "      Traceback (most recent call last):\n"
        "        File \"/job/train.py\", line 7, in load\n"
        "          raise ValueError(n)\n"
        "      ValueError: bad shard 17\n");
}

TEST_CASE("a long traceback keeps its last lines and says how many were left out") {
  std::string traceback;
  for (int i = 1; i <= 45; ++i) traceback += "line " + std::to_string(i) + "\n";
  const std::string tail = launcher::traceback_tail(traceback);
  std::string expected = "... (5 earlier lines left out)";
  for (int i = 6; i <= 45; ++i) expected += "\nline " + std::to_string(i);
  CHECK(tail == expected);
  CHECK(launcher::traceback_tail("a\nb\nc", 2) == "... (1 earlier line left out)\nb\nc");
  CHECK(launcher::traceback_tail("a\n\nc\n", 40) == "a\n\nc");
  CHECK(launcher::traceback_tail("") == "");

  // A huge line is cut, never inside a UTF-8 character ("é" is two bytes).
  const std::string huge = std::string(launcher::kTracebackLineChars - 1, 'x') + "\xc3\xa9" + std::string(100, 'y');
  CHECK(launcher::traceback_tail(huge) ==
        std::string(launcher::kTracebackLineChars - 1, 'x') + " [... 102 more characters]");
}

TEST_CASE("the error file's path is shown only when it outlives ddprun") {
  const std::string path = "/tmp/ddprun_error_file_kept_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << kRecordedError;

  SUBCASE("kept in a log folder (--log_dir): the path, after the contents") {
    elastic::WorkerFailure root = python_failure();
    launcher::add_error_file(root, path, /*kept=*/true);
    CHECK(root.error_file == path);
    const std::string text = summary_of(root);
    CHECK(text.find("    error: ValueError: bad shard 17\n") != std::string::npos);
    CHECK(text.find("      ValueError: bad shard 17\n    error file: " + path + "\n") != std::string::npos);
  }
  SUBCASE("in ddprun's private folder, deleted at exit: the contents, no path") {
    elastic::WorkerFailure root = python_failure();
    launcher::add_error_file(root, path, /*kept=*/false);
    CHECK(root.error_file.empty());
    const std::string text = summary_of(root);
    CHECK(text.find("error file") == std::string::npos);
    CHECK(text.find(path) == std::string::npos);
    CHECK(text ==
          "ddprun: train.py failed (exit code 1) after 0 restarts\n"
          "  root cause: rank 1 (local rank 1) on node0, pid 99: exit code 1\n"
          "    error: ValueError: bad shard 17\n"
          "    traceback:\n"
          "      Traceback (most recent call last):\n"
          "        File \"/job/train.py\", line 12, in main\n"
          "          load(shard)\n"
          "        File \"/job/train.py\", line 7, in load\n"
          "          raise ValueError(f\"bad shard {n}\")\n"
          "      ValueError: bad shard 17\n");
  }
  SUBCASE("no error file written: nothing from it, no path") {
    elastic::WorkerFailure root = python_failure();
    launcher::add_error_file(root, path + ".absent", /*kept=*/true);
    CHECK(root.message.empty());
    CHECK(root.error_file.empty());
    CHECK(summary_of(root).find("error file") == std::string::npos);
  }
  ::unlink(path.c_str());
}

TEST_CASE("failure summary with kinds: every rank that failed on its own, then the consequences") {
  elastic::JobOutcome outcome;
  outcome.exit_code = 1;
  elastic::WorkerFailure root = python_failure();
  root.kind = FailureKind::kCudaOom;
  root.cause = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
  root.exception = "torch.OutOfMemoryError";
  root.location = "/job/train.py:40";
  root.step = 1234;
  elastic::WorkerFailure own = python_failure();
  own.rank = 0;
  own.local_rank = 0;
  own.pid = 98;
  own.exit_code = 3;
  own.kind = FailureKind::kExitCode;
  own.cause = "exit code 3: no shard for rank 0";
  elastic::WorkerFailure plain = own;
  plain.rank = 4;
  plain.cause = "exit code 3";
  elastic::WorkerFailure consequence = own;
  consequence.rank = 2;
  consequence.exit_code = 1;
  consequence.kind = FailureKind::kConsequence;
  consequence.cause = "RuntimeError: Connection closed by peer";
  outcome.failures = {root, own, plain, consequence};
  outcome.stop_reason = "not restarting: the 2 restarts of --max_restarts are spent";
  CHECK(launcher::format_failure_summary(outcome, "train.py") ==
        "ddprun: train.py failed (exit code 1) after 0 restarts\n"
        "  root cause: rank 1 (local rank 1) on node0, pid 99: exit code 1: cuda_oom (torch.OutOfMemoryError: CUDA "
        "out of memory. Tried to allocate 2.00 GiB) at /job/train.py:40 at step 1234\n"
        "  also failed: rank 0 (local rank 0) on node0, pid 98: exit code 3: exit_code (no shard for rank 0)\n"
        "  also failed: rank 4 (local rank 0) on node0, pid 98: exit code 3: exit_code\n"
        "  also failed (a consequence): rank 2 (local rank 0) on node0, pid 98: exit code 1: consequence "
        "(RuntimeError: Connection closed by peer)\n"
        "ddprun: not restarting: the 2 restarts of --max_restarts are spent\n");
}
