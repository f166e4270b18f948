// CoordinatorHost on a real io_context, with a transport that records what it is handed: the
// deadlines it keeps (all, or the restart backoff alone), halt(), membership told once per
// change, and a transport that ends the host from inside deliver() (an etcd leader stepping
// down). io_context::run() returns when no timer is left, so nothing here sleeps.
#include "core/coordinator_host.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <vector>

namespace ddprun::elastic {
namespace {

// Two nodes needed; the join timeout comes at once, so that run() finds it due.
JobSettings settings(int max_nodes) {
  JobSettings s;
  s.run_id = "job";
  s.min_nodes = 2;
  s.max_nodes = max_nodes;
  s.join_timeout = 0.001;
  return s;
}

NodeSpec spec(const std::string& name) {
  NodeSpec n;
  n.run_id = "job";
  n.min_nodes = 2;
  n.max_nodes = 2;
  n.addr = "10.0.0.1";
  n.hostname = name;
  n.master_port = 29500;
  return n;
}

struct Recorder final : CoordinatorTransport {
  std::vector<Messages> delivered;
  std::vector<JobMembership> memberships;
  std::optional<CoordinatorHost>* end_on_finish = nullptr;  // reset it on the first Finish

  void deliver(const Messages& messages) override {
    delivered.push_back(messages);
    for (const Message& m : messages) {
      if (std::holds_alternative<Finish>(m) && end_on_finish) end_on_finish->reset();
    }
  }
  void membership_changed(const JobMembership& membership) override { memberships.push_back(membership); }

  std::vector<Finish> finishes() const {
    std::vector<Finish> out;
    for (const Messages& batch : delivered) {
      for (const Message& m : batch) {
        if (const auto* f = std::get_if<Finish>(&m)) out.push_back(*f);
      }
    }
    return out;
  }
};

TEST_CASE("every deadline: the join timeout finishes the job") {
  asio::io_context io;
  Recorder transport;
  CoordinatorHost host(io, settings(2), transport);
  host.join(1, spec("h1"), Joiner::kHost);
  REQUIRE(transport.delivered.size() == 1);  // the join, answered with nothing yet
  CHECK(transport.delivered.front().empty());
  io.run();
  const std::vector<Finish> finishes = transport.finishes();
  REQUIRE(finishes.size() == 1);
  CHECK(finishes.front().node == 1);
  CHECK(finishes.front().outcome.error.find("join_timeout") != std::string::npos);
  CHECK(host.coordinator().finished());
}

TEST_CASE("the restart backoff alone: no join timeout is kept") {
  asio::io_context io;
  Recorder transport;
  CoordinatorHost host(io, settings(2), transport, CoordinatorHost::Deadlines::kRestartBackoff);
  host.join(1, spec("h1"), Joiner::kHost);
  io.run();
  CHECK(transport.finishes().empty());
  CHECK_FALSE(host.coordinator().finished());
}

TEST_CASE("halted, no deadline fires") {
  asio::io_context io;
  Recorder transport;
  CoordinatorHost host(io, settings(2), transport);
  host.join(1, spec("h1"), Joiner::kHost);
  host.halt();
  host.join(2, spec("h2"), Joiner::kPeer);  // events still reach the coordinator; no timer is set again
  io.run();
  CHECK(transport.finishes().empty());
}

// h1 (the host) and h2 joined, no deadline due while a test runs: two of two, round 1 has started.
struct TwoNodesJoined {
  asio::io_context io;
  Recorder transport;
  CoordinatorHost host{io, far_deadlines(), transport};

  TwoNodesJoined() {
    host.join(1, spec("h1"), Joiner::kHost);
    host.join(2, spec("h2"), Joiner::kPeer);
  }

  static JobSettings far_deadlines() {
    JobSettings s = settings(2);
    s.join_timeout = 600;
    s.last_call_timeout = 600;
    return s;
  }
};

TEST_CASE_FIXTURE(TwoNodesJoined, "a report is the coordinator's call, and a leave names its signal") {
  REQUIRE(transport.delivered.back().size() == 2);  // the second join's: an assignment each
  host.receive(2, LeaveReport{15, ""});
  bool stopped = false;
  for (const Message& m : transport.delivered.back()) {
    if (const auto* stop = std::get_if<Stop>(&m)) {
      stopped = true;
      CHECK(stop->node == 1);
      CHECK(stop->why.find("it left after SIGTERM") != std::string::npos);
    }
  }
  CHECK(stopped);
}

TEST_CASE_FIXTURE(TwoNodesJoined, "a node that leaves as quarantined is counted so, and the round stops") {
  host.receive(2, LeaveReport{0, "its health check `check` exited 1"});
  bool stopped = false;
  for (const Message& m : transport.delivered.back()) {
    if (const auto* stop = std::get_if<Stop>(&m)) {
      stopped = true;
      CHECK(stop->node == 1);
      CHECK(stop->why.find("it is quarantined: its health check `check` exited 1") != std::string::npos);
    }
  }
  CHECK(stopped);
  REQUIRE(!transport.memberships.empty());
  REQUIRE(transport.memberships.back().quarantined.size() == 1);
  CHECK(transport.memberships.back().quarantined.front().why == "its health check `check` exited 1");
}

TEST_CASE_FIXTURE(TwoNodesJoined, "membership is told once per change") {
  CHECK(transport.memberships.empty());
  host.join(3, spec("h3"), Joiner::kPeer);  // the round is full: a spare
  REQUIRE(transport.memberships.size() == 1);
  CHECK(transport.memberships.front().spares.size() == 1);
  host.receive(1, WorkersSucceededReport{1});  // no change in membership
  CHECK(transport.memberships.size() == 1);
}

TEST_CASE("a transport may end the host from inside deliver") {
  asio::io_context io;
  Recorder transport;
  std::optional<CoordinatorHost> host;
  transport.end_on_finish = &host;
  host.emplace(io, settings(2), transport);
  host->join(1, spec("h1"), Joiner::kHost);
  io.run();  // the join timeout's Finish: the host is gone, and nothing touches it after
  CHECK_FALSE(host.has_value());
  CHECK(transport.finishes().size() == 1);
}

}  // namespace
}  // namespace ddprun::elastic
