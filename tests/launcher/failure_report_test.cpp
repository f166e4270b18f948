#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "failure_report.hpp"

using namespace ddprun;

TEST_CASE("signal names") {
  CHECK(launcher::signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(launcher::signal_name(SIGKILL) == "SIGKILL");
}

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
