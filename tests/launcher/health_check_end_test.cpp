#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <string>

#include "ddprun/exit_codes.hpp"
#include "health_check.hpp"
#include "report/health_check_end.hpp"
#include "report/job_exit.hpp"
#include "report/result_file.hpp"

using namespace ddprun;
using namespace ddprun::launcher;

namespace {

int exited(int code) { return W_EXITCODE(code, 0); }
int killed(int sig) { return W_EXITCODE(0, sig); }

HealthCheckReport failed_check() {
  HealthCheckReport r;
  r.command = "/opt/check-gpus";
  r.verdict = judge_health_check({exited(1), false, 0}, 60);
  r.seconds = 1.5;
  r.last_lines = {"checking GPU 0: ok", "checking GPU 1: Xid 79, fallen off the bus"};
  return r;
}

}  // namespace

TEST_CASE("a health check's end: join, warn and join, or leave as quarantined") {
  struct Row {
    const char* name;
    HealthCheckEnd end;
    HealthAction action;
    const char* what;
    int exit_code;
  };
  const Row rows[] = {
      {"exit 0 joins", {exited(0), false, 0}, HealthAction::kJoin, "exited 0", 0},
      {"exit 1: the node is unfit", {exited(1), false, 0}, HealthAction::kQuarantine, "exited 1", 1},
      {"exit 2: the check's own trouble", {exited(2), false, 0}, HealthAction::kWarnAndJoin, "exited 2", 2},
      {"any other code", {exited(127), false, 0}, HealthAction::kWarnAndJoin, "exited 127", 127},
      {"a signal from elsewhere", {killed(SIGSEGV), false, 0}, HealthAction::kWarnAndJoin, "was killed by SIGSEGV", -1},
      {"its deadline",
       {killed(SIGKILL), true, 0},
       HealthAction::kWarnAndJoin,
       "timed out after 2.5 s (--health_check_timeout)",
       -1},
      // It exited 1 between the deadline and the kill: the deadline decides, not the late verdict.
      {"exit 1 past its deadline",
       {exited(1), true, 0},
       HealthAction::kWarnAndJoin,
       "timed out after 2.5 s (--health_check_timeout)",
       -1},
      {"no start", {0, false, ENOENT}, HealthAction::kWarnAndJoin, "could not start: No such file or directory", -1},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const HealthCheckVerdict v = judge_health_check(row.end, 2.5);
    CHECK(v.action == row.action);
    CHECK(v.what == row.what);
    CHECK(v.exit_code == row.exit_code);
  }
}

TEST_CASE("a failed health check in the summary, the result file and the leave's reason") {
  const HealthCheckReport r = failed_check();
  CHECK(quarantine_reason(r) == "its health check `/opt/check-gpus` exited 1");
  elastic::RoundAssignment last;
  last.restart_count = 1;
  last.quarantined = {{"h2 (10.0.0.2)", "2 segfaults"}};
  const elastic::JobOutcome outcome = health_check_quarantine(r, "node7", last);
  CHECK(outcome.exit_code == exit_code::kQuarantined);
  CHECK(outcome.restarts == 1);
  CHECK(outcome.error ==
        "this node (node7) is quarantined: its health check `/opt/check-gpus` exited 1; it leaves the job");
  REQUIRE(outcome.quarantined.size() == 2);
  CHECK(outcome.quarantined.back().node == "node7");

  const JobExit e = job_exit(outcome, 0, "train.py", &r);
  CHECK(e.exit_code == 71);
  CHECK(e.console ==
        "ddprun: this node (node7) is quarantined: its health check `/opt/check-gpus` exited 1; it leaves the job; "
        "exit 71 so that the scheduler can drain this host\n"
        "ddprun: the health check's last 2 lines of output:\n"
        "  checking GPU 0: ok\n"
        "  checking GPU 1: Xid 79, fallen off the bus\n");
  // A check that printed nothing: only the line that names it.
  HealthCheckReport silent = r;
  silent.last_lines.clear();
  CHECK(job_exit(outcome, 0, "train.py", &silent).console.find("last") == std::string::npos);

  const nlohmann::json j = health_check_json(r);
  CHECK(j["command"] == "/opt/check-gpus");
  CHECK(j["result"] == "failed");
  CHECK(j["exit_code"] == 1);
  CHECK(j["what"] == "exited 1");
  CHECK(j["output"] == nlohmann::json::array({"checking GPU 0: ok", "checking GPU 1: Xid 79, fallen off the bus"}));
  HealthCheckReport slow = r;
  slow.verdict = judge_health_check({killed(SIGKILL), true, 0}, 60);
  CHECK(health_check_json(slow)["result"] == "warning");
  CHECK(health_check_json(slow)["exit_code"].is_null());
  CHECK(health_check_warning(slow) ==
        "ddprun: warning: the health check `/opt/check-gpus` timed out after 60 s (--health_check_timeout); joining "
        "anyway (only exit 1 keeps the node out)\n");
  CHECK(job_result({}, 0, 0, 0, 0)["health_check"].is_null());
}

TEST_CASE("what a health check is told") {
  config::LaunchConfig c;
  c.nproc_per_node = 4;
  c.max_restarts = 3;
  c.health_check_timeout = 7.5;
  elastic::RoundAssignment last;
  last.restart_count = 2;
  const auto v = health_check_variables(c, 3, last, "job42");
  CHECK(v.at("DDPRUN_HEALTH_CHECK_ATTEMPT") == "3");
  CHECK(v.at("DDPRUN_HEALTH_CHECK_TIMEOUT") == "7.5");
  CHECK(v.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(v.at("TORCHELASTIC_MAX_RESTARTS") == "3");
  CHECK(v.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(v.at("TORCHELASTIC_RUN_ID") == "job42");
  CHECK(health_check_variables(c, 0, {}, "").count("TORCHELASTIC_RUN_ID") == 0);
}
