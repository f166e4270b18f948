#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "report/result_file.hpp"

using namespace ddprun;

TEST_CASE("the result file: what a requeue script reads") {
  elastic::JobOutcome outcome;
  SUBCASE("success") {
    const auto j = launcher::job_result(outcome, 0, 0, 2, 3);
    CHECK(j["exit_code"] == 0);
    CHECK(j["kind"].is_null());
    CHECK(j["retryable"] == false);
    CHECK(j["root_cause"].is_null());
    CHECK(j["attempt"] == 2);
    CHECK(j["max_restarts"] == 3);
  }
  SUBCASE("a failure: the root cause's kind, retryable as the coordinator decided") {
    elastic::WorkerFailure f;
    f.rank = 3;
    f.local_rank = 1;
    f.host = "node7";
    f.pid = 42;
    f.exit_code = 137;
    f.signal = SIGKILL;
    f.kind = FailureKind::kHostOom;
    f.cause = "killed by the out-of-memory killer";
    f.step = 9;
    outcome.failures = {f};
    outcome.exit_code = 137;
    outcome.restarts = 1;
    outcome.retryable = true;
    outcome.stop_reason = "not restarting: the 1 restarts of --max_restarts are spent";
    const auto j = launcher::job_result(outcome, 137, 0, 1, 1);
    CHECK(j["kind"] == "host_oom");
    CHECK(j["retryable"] == true);
    CHECK(j["message"] == "killed by the out-of-memory killer");
    CHECK(j["root_cause"]["rank"] == 3);
    CHECK(j["root_cause"]["host"] == "node7");
    CHECK(j["root_cause"]["pid"] == 42);
    CHECK(j["root_cause"]["signal"] == "SIGKILL");
    CHECK(j["root_cause"]["step"] == 9);
    CHECK(j["root_cause"]["exception"].is_null());
    CHECK(j["failures"].size() == 1);
    CHECK(j["restarts"] == 1);
    CHECK(j["stop_reason"] == outcome.stop_reason);
  }
  SUBCASE("stopped by a signal: retryable (a preemption)") {
    const auto j = launcher::job_result(outcome, 143, SIGTERM, 0, 0);
    CHECK(j["kind"] == "stopped");
    CHECK(j["retryable"] == true);
    CHECK(j["signal"] == "SIGTERM");
  }
  SUBCASE("this node quarantined: drain the host, do not run it again") {
    elastic::WorkerFailure f;
    f.rank = 2;
    f.host = "node7";
    f.exit_code = 139;
    f.signal = SIGSEGV;
    f.kind = FailureKind::kSegfault;
    outcome.failures = {f};
    outcome.exit_code = 71;
    outcome.error = "this node (node7 (10.0.0.7)) is quarantined: ...";
    outcome.quarantined = {{"node7 (10.0.0.7)", "2 segfaults"}};
    const auto j = launcher::job_result(outcome, 71, 0, 1, 3);
    CHECK(j["kind"] == "quarantined");
    CHECK(j["retryable"] == false);
    CHECK(j["message"] == outcome.error);
    CHECK(j["root_cause"]["kind"] == "segfault");
    CHECK(j["quarantined"] == nlohmann::json::parse(R"j([{"node": "node7 (10.0.0.7)", "why": "2 segfaults"}])j"));
  }
  SUBCASE("a rendezvous error") {
    outcome.exit_code = 69;
    outcome.error = "timed out";
    outcome.retryable = true;
    const auto j = launcher::job_result(outcome, 69, 0, 0, 0);
    CHECK(j["kind"] == "rendezvous");
    CHECK(j["message"] == "timed out");
  }
}

TEST_CASE("the result file is replaced whole, and a folder that cannot take it is named") {
  const auto dir = std::filesystem::temp_directory_path() / ("ddprun_result_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "result.json").string();
  std::ofstream(path) << "old";
  CHECK(launcher::write_result_file(path, {{"exit_code", 0}}) == "");
  std::ifstream in(path);
  CHECK(nlohmann::json::parse(in)["exit_code"] == 0);
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
  const std::string error = launcher::write_result_file((dir / "missing" / "r.json").string(), {});
  CHECK(error.find("--result_file=") == 0);
  CHECK(error.find("No such file or directory") != std::string::npos);
  std::filesystem::remove_all(dir);
}
