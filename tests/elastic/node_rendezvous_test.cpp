// NodeRendezvous (elastic/src/core/node_rendezvous.cpp): what the launcher is told when the
// fence's deadline has passed by the time one of its reports arrives, as it does after the
// launcher was stopped (SIGSTOP, a stall) across the deadline and its workers' end is handled
// before the fence's timer. A backend that only records what it would send stands for TCP and
// etcd; the launcher's handlers are recorded as text.
#include <doctest/doctest.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "core/node_rendezvous.hpp"
#include "core/rendezvous_protocol.hpp"
#include "ddprun/exit_codes.hpp"

namespace {

using ddprun::elastic::JobOutcome;
using ddprun::elastic::NodeRendezvous;
using ddprun::elastic::RendezvousConfig;
using ddprun::elastic::RoundAssignment;
using ddprun::elastic::StopReason;
using ddprun::elastic::WorkerFailure;

class RecordingRendezvous final : public NodeRendezvous {
 public:
  explicit RecordingRendezvous(asio::io_context& io) : NodeRendezvous(io) {}

  std::string told;                  // the launcher's handlers, in the order called
  std::string said;                  // the lines said on the launcher's console
  std::vector<std::string> reports;  // the messages sent to the coordinator, by type
  std::vector<JobOutcome> outcomes;

  void join(Handlers handlers) override {
    handlers.start_round = [this](const RoundAssignment& a) { tell("start round " + std::to_string(a.round)); };
    handlers.stop_round = [this](StopReason, const std::string&) { tell("stop round"); };
    handlers.fence = [this](const std::string&) { tell("fence"); };
    handlers.finish = [this](const JobOutcome& o) {
      tell("finish " + std::to_string(o.exit_code));
      outcomes.push_back(o);
    };
    handlers.say = [this](const std::string& line) { said += line; };
    RendezvousConfig config;
    config.nproc = 2;
    config.agent_store = false;
    REQUIRE(start_joining(std::move(handlers), config));
    apply(round_.joined());
  }

  void coordinator_says(const nlohmann::json& message) {
    handle_message(message, [this](JobOutcome outcome) { end(std::move(outcome)); });
  }
  // The coordinator last acknowledged a message sent `ago` seconds before now.
  void heard(double ago, double lifetime) {
    coordinator_heard(std::chrono::steady_clock::now() - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                             std::chrono::duration<double>(ago)),
                      lifetime, "the test's coordinator");
  }

 protected:
  void report(const nlohmann::json& message) override { reports.push_back(message.at("type").get<std::string>()); }
  void leave_job(int, const std::string&) override {}
  void release() override {}

 private:
  void tell(const std::string& what) { told += (told.empty() ? "" : ", ") + what; }
};

nlohmann::json assign(int round) {
  RoundAssignment a;
  a.round = round;
  a.group_world_size = 2;
  a.world_size = 4;
  a.master_addr = "127.0.0.1";
  a.master_port = 29500;
  return {{"type", "assign"}, {"assignment", a}};
}

nlohmann::json stop(int round) {
  return {{"type", "stop"}, {"round", round}, {"reason", "worker_failed"}, {"why", "a worker failed elsewhere"}};
}

WorkerFailure failure() {
  WorkerFailure f;
  f.rank = 1;
  f.exit_code = 1;
  return f;
}

}  // namespace

TEST_CASE("a report that comes past the fence's deadline fences, and the job ends here once the workers are stopped") {
  struct Row {
    std::string when;
    bool stopped_first;        // the coordinator stopped the round before the report (NodeRound: stopping)
    bool worker_failed;        // the report: a worker's failure; else that the workers stopped
    bool stopped_after;        // the launcher reports its workers stopped after what it was told
    std::string told;
    std::string said;  // the fence's line
  };
  const std::vector<Row> rows{
      // The launcher was stopped across the deadline while its workers stopped on the coordinator's
      // word; they ended meanwhile, and their end was handled before the fence's timer. It has no
      // more to report: the job must end here on this report.
      {"the workers stopped, after the coordinator's stop", true, false, false,
       "start round 1, stop round, fence, finish 69",
       "ddprun: fencing: this node's workers have ended: the test's coordinator acknowledged nothing for 10.0 s\n"},
      // A worker failed here: the failure's report comes past the deadline; the launcher stops the
      // others and reports them stopped, as it does after any failure.
      {"a worker's failure", false, true, true, "start round 1, fence, stop round, finish 69",
       "ddprun: fencing: killing this node's workers (SIGKILL): the test's coordinator acknowledged nothing for 10.0 "
       "s\n"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.when);
    asio::io_context io;
    RecordingRendezvous rendezvous(io);
    rendezvous.join({});
    rendezvous.coordinator_says(assign(1));
    if (row.stopped_first) rendezvous.coordinator_says(stop(1));
    io.run();
    io.restart();
    // The coordinator's last acknowledgement was of a message sent 10 s ago, its lifetime 1 s:
    // the deadline has passed, and the fence's timer has not run yet.
    rendezvous.heard(10, 1);
    if (row.worker_failed) {
      rendezvous.worker_failed(1, failure());
    } else {
      rendezvous.workers_stopped(1, {});
    }
    io.run();
    io.restart();
    if (row.stopped_after) {
      rendezvous.workers_stopped(1, {});
      io.run();
      io.restart();
    }
    CHECK(rendezvous.told == row.told);
    CHECK(rendezvous.said == row.said);
    CHECK(rendezvous.reports.empty());  // a fenced node tells the coordinator nothing more
    REQUIRE(rendezvous.outcomes.size() == 1);
    CHECK(rendezvous.outcomes[0].exit_code == ddprun::exit_code::kRendezvous);
    CHECK(rendezvous.outcomes[0].error.find("fenced") != std::string::npos);
  }
}

TEST_CASE("a round whose start comes past the fence's deadline starts no worker, and the job ends here") {
  asio::io_context io;
  RecordingRendezvous rendezvous(io);
  rendezvous.join({});
  // The round's start is handled once the launcher runs again (it was stopped or stalled), by
  // then past the deadline, before the fence's timer.
  rendezvous.coordinator_says(assign(1));
  rendezvous.heard(10, 1);
  io.run();
  CHECK(rendezvous.told == "fence, stop round, finish 69");
  CHECK(rendezvous.said ==
        "ddprun: fencing: this node starts no workers: the test's coordinator acknowledged nothing for 10.0 s\n");
  CHECK(rendezvous.reports.empty());
  REQUIRE(rendezvous.outcomes.size() == 1);
  CHECK(rendezvous.outcomes[0].exit_code == ddprun::exit_code::kRendezvous);
}
