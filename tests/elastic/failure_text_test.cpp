// The failure-text family (ddprun/failure_text.hpp) as one table: each row one failure and what
// every member of the family says about it.
#include "ddprun/failure_text.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace ddprun::elastic {
namespace {

WorkerFailure failure(int exit_code, int signal, FailureKindName kind, std::string cause) {
  WorkerFailure f;
  f.rank = 3;
  f.local_rank = 1;
  f.host = "h2";
  f.exit_code = exit_code;
  f.signal = signal;
  f.kind = std::move(kind);
  f.cause = std::move(cause);
  return f;
}

TEST_CASE("a failure in words: the end said once, the cause without it") {
  using K = FailureKind;
  struct Row {
    const char* name;
    WorkerFailure f;
    std::string end, cause_after_end, kind_and_cause, kind, stop;
  };
  WorkerFailure outside = failure(137, 9, K::kHostOom, "SIGKILL from outside ddprun, probably the OOM killer");
  outside.signal_from_outside = true;
  outside.message = "out of memory\ntraceback";
  WorkerFailure hung = failure(124, 0, K::kHang, "no heartbeat for 31.0 s");
  hung.hung = true;
  WorkerFailure where = failure(1, 0, K::kPythonException, "KeyError: 'lr'");
  where.location = "train.py:12";
  where.step = 1234;
  WorkerFailure unclassified = failure(2, 0, FailureKindName(), "");
  WorkerFailure outside_unclassified = failure(137, 9, FailureKindName(), "");
  outside_unclassified.signal_from_outside = true;
  unclassified.host = "";
  const std::vector<Row> table = {
      {"exit code and a line", failure(3, 0, K::kExitCode, "exit code 3: no shard for rank 3"), "exit code 3",
       "no shard for rank 3", "exit_code (no shard for rank 3)", "rank 3 on h2: exit_code (no shard for rank 3)",
       "worker rank 3 (local rank 1) on h2 failed with exit code 3"},
      {"exit code alone", failure(2, 0, K::kExitCode, "exit code 2"), "exit code 2", "", "exit_code",
       "rank 3 on h2: exit_code", "worker rank 3 (local rank 1) on h2 failed with exit code 2"},
      // A cause of a --failure_rules line that reads like another exit code is not cut: "exit code
      // 12" does not begin with the end "exit code 1" (describe_kind once left "2: x" less ": ").
      {"another exit code in the cause", failure(1, 0, FailureKindName::parse("gpu_fault").value(), "exit code 12: x"),
       "exit code 1", "exit code 12: x", "gpu_fault (exit code 12: x)", "rank 3 on h2: gpu_fault (exit code 12: x)",
       "worker rank 3 (local rank 1) on h2 failed with exit code 1"},
      {"a signal", failure(139, 11, K::kSegfault, "SIGSEGV (Segmentation fault)"), "killed by SIGSEGV (exit code 139)",
       "SIGSEGV (Segmentation fault)", "segfault (SIGSEGV (Segmentation fault))",
       "rank 3 on h2: segfault (SIGSEGV (Segmentation fault))",
       "worker rank 3 (local rank 1) on h2 was killed by signal 11 (SIGSEGV)"},
      // Classified, the kind's cause tells whether it was the out-of-memory killer; before, a hint.
      {"SIGKILL from outside, with a message", outside, "killed by SIGKILL (exit code 137), not sent by ddprun",
       "SIGKILL from outside ddprun, probably the OOM killer",
       "host_oom (SIGKILL from outside ddprun, probably the OOM killer)",
       "rank 3 on h2: host_oom (SIGKILL from outside ddprun, probably the OOM killer)",
       "worker rank 3 (local rank 1) on h2 was killed by signal 9 (SIGKILL) sent from outside ddprun: out of memory"},
      {"hung", hung, "hung (exit code 124)", "no heartbeat for 31.0 s", "hang (no heartbeat for 31.0 s)",
       "rank 3 on h2: hang (no heartbeat for 31.0 s)", "worker rank 3 (local rank 1) on h2 hung"},
      {"where and at which step", where, "exit code 1", "KeyError: 'lr'",
       "python_exception (KeyError: 'lr') at train.py:12 at step 1234",
       "rank 3 on h2: python_exception (KeyError: 'lr')", "worker rank 3 (local rank 1) on h2 failed with exit code 1"},
      {"no kind, no host", unclassified, "exit code 2", "", "", "rank 3 on : failed",
       "worker rank 3 (local rank 1) on ? failed with exit code 2"},
      {"SIGKILL from outside, not classified yet", outside_unclassified,
       "killed by SIGKILL (exit code 137), not sent by ddprun: killed from outside, often the out-of-memory killer "
       "(check dmesg)",
       "", "", "rank 3 on h2: failed", "worker rank 3 (local rank 1) on h2 was killed by signal 9 (SIGKILL) sent from outside ddprun"},
  };
  for (const Row& row : table) {
    CAPTURE(row.name);
    CHECK(describe_end(row.f) == row.end);
    CHECK(cause_after_end(row.f) == row.cause_after_end);
    CHECK(describe_kind_and_cause(row.f) == row.kind_and_cause);
    CHECK(describe_kind(row.f) == row.kind);
    CHECK(describe_stop(row.f) == row.stop);
  }
}

TEST_CASE("a restart's reason in words, from its fields") {
  struct Row {
    const char* name;
    RestartReason reason;
    std::string budget, cause;
  };
  const std::vector<Row> table = {
      {"after a round that progressed",
       {2, 5, 0, "rank 3 on h2: exit_code", 0, 5, 0, {}},
       "restart 2 of 5",
       "after rank 3 on h2: exit_code"},
      {"within a window",
       {1, 3, 60, "rank 0 on h1: hang (no heartbeat)", 0, 0, 0, {}},
       "restart 1 of 3 within 60 s",
       "after rank 0 on h1: hang (no heartbeat)"},
      {"no progress, a crash loop limit",
       {3, 5, 0, "rank 3 on h2: segfault", 2, 5, 1.5, {}},
       "restart 3 of 5",
       "after rank 3 on h2: segfault; no progress since the start (2 in a row, the crash loop ends at 5), waited 1.5 "
       "s"},
      {"no progress, no limit",
       {1, 5, 0, "rank 3 on h2: abort", 1, 0, 1, {}},
       "restart 1 of 5",
       "after rank 3 on h2: abort; no progress since the start (1 in a row), waited 1 s"},
      {"what quarantine found",
       {1, 5, 0, "rank 3 on h2: nccl_error", 0, 5, 0, {"node h2 (10.0.0.2) is suspect: its workers ...", "x"}},
       "restart 1 of 5",
       "after rank 3 on h2: nccl_error; node h2 (10.0.0.2) is suspect: its workers ...; x"},
  };
  for (const Row& row : table) {
    CAPTURE(row.name);
    CHECK(describe_restart_budget(row.reason) == row.budget);
    CHECK(describe_restart_cause(row.reason) == row.cause);
    CHECK(describe_restart(row.reason) == row.budget + " " + row.cause);
  }
  CHECK(describe_restart(RestartReason{}).empty());
}

}  // namespace
}  // namespace ddprun::elastic
