#include <doctest/doctest.h>

#include <signal.h>

#include "ddprun/exit_codes.hpp"
#include "report/job_exit.hpp"

using namespace ddprun;
using namespace ddprun::launcher;

namespace {

elastic::WorkerFailure failure(int rank, int exit_code) {
  elastic::WorkerFailure f;
  f.rank = rank;
  f.host = "node7";
  f.exit_code = exit_code;
  f.kind = FailureKind::kSegfault;
  f.retryable = true;
  f.cause = "SIGSEGV";
  return f;
}

}  // namespace

TEST_CASE("how ddprun ends, as a table") {
  elastic::JobOutcome success;
  elastic::JobOutcome failed;
  failed.exit_code = 139;
  failed.failures = {failure(3, 139), failure(1, 143)};
  elastic::JobOutcome quarantined;
  quarantined.exit_code = exit_code::kQuarantined;
  quarantined.error = "this node was quarantined: 2 hardware-like failures";
  elastic::JobOutcome others_quarantined;
  others_quarantined.quarantined = {{"h2 (10.0.0.2)", "2 segfaults"}};

  struct Row {
    const char* name;
    const elastic::JobOutcome& outcome;
    int signal;
    int exit_code;
    const char* console_has;  // "" : the console stays empty
  };
  const Row rows[] = {
      {"success", success, 0, 0, ""},
      {"stopped by SIGTERM", success, SIGTERM, 143, "ddprun: stopped by SIGTERM; workers stopped\n"},
      {"stopped by SIGINT while failing", failed, SIGINT, 130, "ddprun: stopped by SIGINT; workers stopped\n"},
      {"a failure: the root cause's code and the summary", failed, 0, 139, "rank 3"},
      {"this node quarantined", quarantined, 0, exit_code::kQuarantined,
       "ddprun: this node was quarantined: 2 hardware-like failures; exit 71 so that the scheduler can drain this host\n"},
      {"a success with another node quarantined", others_quarantined, 0, 0,
       "ddprun: quarantined during the job: h2 (10.0.0.2): 2 segfaults\n"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const JobExit e = job_exit(row.outcome, row.signal, "train.py");
    CHECK(e.exit_code == row.exit_code);
    if (std::string(row.console_has).empty()) {
      CHECK(e.console.empty());
    } else {
      CHECK(e.console.find(row.console_has) != std::string::npos);
    }
    CHECK(e.root_cause.has_value() == !row.outcome.failures.empty());
  }
}

TEST_CASE("the root cause as the live view shows it") {
  const FailureView v = failure_view(failure(3, 139));
  CHECK(v.rank == 3);
  CHECK(v.host == "node7");
  CHECK(v.exit_code == 139);
  CHECK(v.kind == "segfault");
  CHECK(v.retryable);
  CHECK(v.cause == "SIGSEGV");
}
