// NodeRound (elastic/src/core/node_round.cpp): every state × every event, as one table. Each
// row holds in both backends unless it says "etcd:" (a case only a new etcd leader brings
// about; the TCP host never sends it, and would be answered the same).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <functional>
#include <string>
#include <vector>

#include "core/node_round.hpp"

namespace {

using ddprun::elastic::JobOutcome;
using ddprun::elastic::NodeRound;
using ddprun::elastic::RoundAssignment;
using ddprun::elastic::StopReason;
using ddprun::elastic::WorkerFailure;
using State = NodeRound::State;

RoundAssignment round_of(int n, int restarts = 0) {
  RoundAssignment a;
  a.round = n;
  a.restart_count = restarts;
  return a;
}

JobOutcome outcome(int code, std::string error = "") {
  JobOutcome o;
  o.exit_code = code;
  o.error = std::move(error);
  return o;
}

WorkerFailure failure(int rank) {
  WorkerFailure f;
  f.rank = rank;
  f.exit_code = 3;
  return f;
}

// The actions as short text, so that a row reads as what the node does.
std::vector<std::string> describe(const NodeRound::Actions& actions) {
  std::vector<std::string> out;
  for (const auto& action : actions) {
    if (const auto* a = std::get_if<NodeRound::StartWorkers>(&action)) {
      out.push_back(fmt::format("start round {}", a->assignment.round));
    } else if (const auto* a = std::get_if<NodeRound::StopWorkers>(&action)) {
      out.push_back(fmt::format("stop {}: {}", to_string(a->reason), a->why));
    } else if (std::holds_alternative<NodeRound::EndStoreRound>(action)) {
      out.push_back("end store round");
    } else if (const auto* a = std::get_if<NodeRound::Report>(&action)) {
      std::string text = fmt::format("report {} round {}", a->message.at("type").get<std::string>(),
                                     a->message.at("round").get<int>());
      if (a->message.contains("failures")) text += fmt::format(" ({} more)", a->message["failures"].size());
      if (a->message.contains("failure")) text += fmt::format(" (rank {})", a->message["failure"]["rank"].get<int>());
      out.push_back(text);
    } else if (const auto* a = std::get_if<NodeRound::Finish>(&action)) {
      out.push_back(fmt::format("finish {}{}", a->outcome.exit_code, a->outcome.error.empty() ? "" : ": " + a->outcome.error));
    } else if (const auto* a = std::get_if<NodeRound::Leave>(&action)) {
      out.push_back(fmt::format("leave {}", a->signal));
    } else if (const auto* a = std::get_if<NodeRound::WaitAsSpare>(&action)) {
      out.push_back(fmt::format("spare {}: {}", a->place, a->why));
    }
  }
  return out;
}

// A NodeRound brought to `state` the way a run gets there; its round is 1.
NodeRound in_state(State state) {
  NodeRound n;
  if (state == State::kJoining) return n;
  n.joined();
  switch (state) {
    case State::kDone:
      n.end(outcome(0));
      break;
    case State::kRunning:
      n.assign(round_of(1));
      break;
    case State::kStopping:
      n.assign(round_of(1));
      n.stop(1, StopReason::kWorkerFailed, "rank 5 failed");
      break;
    case State::kSucceeded:
      n.assign(round_of(1));
      n.workers_succeeded(1);
      break;
    default:
      break;
  }
  REQUIRE(n.state() == state);
  return n;
}

using Event = std::function<NodeRound::Actions(NodeRound&)>;

const Event joined = [](NodeRound& n) { return n.joined(); };
const Event rejoining = [](NodeRound& n) { return n.rejoining(); };
const Event assign2 = [](NodeRound& n) { return n.assign(round_of(2, 1)); };
const Event stop1 = [](NodeRound& n) { return n.stop(1, StopReason::kNodeLost, "node b lost"); };
const Event stop0 = [](NodeRound& n) { return n.stop(0, StopReason::kNodeLost, "node b lost"); };
const Event end_ok = [](NodeRound& n) { return n.end(outcome(0)); };
const Event end_lost = [](NodeRound& n) { return n.end(outcome(69, "lost the rendezvous")); };
const Event leader_lost = [](NodeRound& n) { return n.coordinator_lost("the rendezvous leader a was lost"); };
const Event failed1 = [](NodeRound& n) { return n.worker_failed(1, failure(2)); };
const Event failed0 = [](NodeRound& n) { return n.worker_failed(0, failure(2)); };
const Event stopped1 = [](NodeRound& n) { return n.workers_stopped(1, {failure(3)}); };
const Event stopped0 = [](NodeRound& n) { return n.workers_stopped(0, {}); };
const Event succeeded1 = [](NodeRound& n) { return n.workers_succeeded(1); };
const Event succeeded0 = [](NodeRound& n) { return n.workers_succeeded(0); };
const Event leave15 = [](NodeRound& n) { return n.leave(15); };
const Event spare = [](NodeRound& n) { return n.spare(1, "the round is full"); };

struct Row {
  State from;
  const char* event_name;
  Event event;
  State to;
  std::vector<std::string> actions;
};

}  // namespace

TEST_CASE("NodeRound: every state and event") {
  using S = State;
  const std::vector<Row> rows = {
      // joining: not yet in the job.
      {S::kJoining, "joined", joined, S::kIdle, {}},
      {S::kJoining, "rejoining", rejoining, S::kJoining, {}},
      {S::kJoining, "assign", assign2, S::kJoining, {}},
      {S::kJoining, "stop", stop1, S::kJoining, {}},
      {S::kJoining, "end (could not join)", end_lost, S::kDone, {"finish 69: lost the rendezvous"}},
      {S::kJoining, "coordinator lost", leader_lost, S::kJoining, {}},
      {S::kJoining, "worker_failed", failed1, S::kJoining, {}},
      {S::kJoining, "workers_stopped", stopped1, S::kJoining, {}},
      {S::kJoining, "workers_succeeded", succeeded1, S::kJoining, {}},
      {S::kJoining, "leave", leave15, S::kDone, {"leave 15"}},
      {S::kJoining, "spare", spare, S::kJoining, {}},
      // idle: in the job, no workers.
      {S::kIdle, "joined again", joined, S::kIdle, {}},
      {S::kIdle, "rejoining before a round", rejoining, S::kJoining, {}},
      {S::kIdle, "assign", assign2, S::kRunning, {"start round 2"}},
      {S::kIdle, "stop", stop0, S::kIdle, {}},
      {S::kIdle, "end", end_ok, S::kDone, {"finish 0"}},
      {S::kIdle, "coordinator lost", leader_lost, S::kIdle, {}},
      {S::kIdle, "worker_failed", failed0, S::kIdle, {}},
      {S::kIdle, "workers_stopped", stopped0, S::kIdle, {}},
      {S::kIdle, "workers_succeeded", succeeded0, S::kIdle, {}},
      {S::kIdle, "leave", leave15, S::kDone, {"leave 15"}},
      {S::kIdle, "spare: waits, no workers", spare, S::kIdle, {"spare 1: the round is full"}},
      // running round 1.
      {S::kRunning, "joined", joined, S::kRunning, {}},
      {S::kRunning, "rejoining", rejoining, S::kRunning, {}},
      {S::kRunning, "assign (one at a time)", assign2, S::kRunning, {}},
      {S::kRunning, "stop this round", stop1, S::kStopping, {"stop node_lost: node b lost"}},
      {S::kRunning, "stop a past round", stop0, S::kRunning, {}},
      {S::kRunning, "end: the workers stop first", end_lost, S::kStopping, {"stop shutdown: lost the rendezvous"}},
      {S::kRunning, "end with no error", end_ok, S::kStopping, {"stop shutdown: the job ended"}},
      {S::kRunning, "etcd: coordinator lost", leader_lost, S::kStopping,
       {"stop node_lost: the rendezvous leader a was lost"}},
      {S::kRunning, "worker_failed", failed1, S::kStopping, {"report worker_failed round 1 (rank 2)"}},
      {S::kRunning, "worker_failed of a past round", failed0, S::kRunning, {}},
      {S::kRunning, "workers_stopped unasked", stopped1, S::kRunning, {}},
      {S::kRunning, "workers_succeeded", succeeded1, S::kSucceeded, {"report workers_succeeded round 1"}},
      {S::kRunning, "workers_succeeded of a past round", succeeded0, S::kRunning, {}},
      {S::kRunning, "leave", leave15, S::kDone, {"leave 15"}},
      {S::kRunning, "spare: stale", spare, S::kRunning, {}},
      // stopping round 1.
      {S::kStopping, "rejoining", rejoining, S::kStopping, {}},
      {S::kStopping, "stop again", stop1, S::kStopping, {}},
      {S::kStopping, "end: after the workers stop", end_lost, S::kStopping, {}},
      {S::kStopping, "etcd: coordinator lost", leader_lost, S::kStopping, {}},
      {S::kStopping, "worker_failed: reported once", failed1, S::kStopping, {}},
      {S::kStopping, "workers_stopped", stopped1, S::kIdle,
       {"end store round", "report workers_stopped round 1 (1 more)"}},
      {S::kStopping, "workers_stopped of a past round", stopped0, S::kStopping, {}},
      {S::kStopping, "workers_succeeded", succeeded1, S::kStopping, {}},
      {S::kStopping, "etcd: assign from a new leader waits", assign2, S::kStopping, {}},
      {S::kStopping, "leave", leave15, S::kDone, {"leave 15"}},
      {S::kStopping, "spare: stale", spare, S::kStopping, {}},
      // succeeded in round 1: the store serves on.
      {S::kSucceeded, "assign: the last round's store closes first", assign2, S::kRunning,
       {"end store round", "start round 2"}},
      {S::kSucceeded, "stop this round: nothing to stop", stop1, S::kIdle,
       {"end store round", "report workers_stopped round 1 (0 more)"}},
      {S::kSucceeded, "stop a past round", stop0, S::kSucceeded, {}},
      {S::kSucceeded, "end", end_ok, S::kDone, {"finish 0"}},
      {S::kSucceeded, "etcd: coordinator lost", leader_lost, S::kIdle, {"end store round"}},
      {S::kSucceeded, "worker_failed", failed1, S::kSucceeded, {}},
      {S::kSucceeded, "workers_stopped", stopped1, S::kSucceeded, {}},
      {S::kSucceeded, "workers_succeeded again", succeeded1, S::kSucceeded, {}},
      {S::kSucceeded, "leave", leave15, S::kDone, {"leave 15"}},
      {S::kSucceeded, "spare: stale", spare, S::kSucceeded, {}},
      // done: nothing more happens, but a leave is still told.
      {S::kDone, "joined", joined, S::kDone, {}},
      {S::kDone, "assign", assign2, S::kDone, {}},
      {S::kDone, "stop", stop1, S::kDone, {}},
      {S::kDone, "end", end_lost, S::kDone, {}},
      {S::kDone, "coordinator lost", leader_lost, S::kDone, {}},
      {S::kDone, "worker_failed", failed1, S::kDone, {}},
      {S::kDone, "workers_stopped", stopped1, S::kDone, {}},
      {S::kDone, "workers_succeeded", succeeded1, S::kDone, {}},
      {S::kDone, "leave", leave15, S::kDone, {"leave 15"}},
      {S::kDone, "spare", spare, S::kDone, {}},
  };
  for (const Row& row : rows) {
    CAPTURE(to_string(row.from));
    CAPTURE(row.event_name);
    NodeRound n = in_state(row.from);
    const auto actions = describe(row.event(n));
    CHECK(actions == row.actions);
    CHECK(to_string(n.state()) == std::string(to_string(row.to)));
  }
}

TEST_CASE("NodeRound: a job that ends during a round ends after its workers stopped") {
  NodeRound n = in_state(State::kRunning);
  CHECK(describe(n.end(outcome(69, "lost the rendezvous"))) ==
        std::vector<std::string>{"stop shutdown: lost the rendezvous"});
  // The first outcome stands: a later loss does not replace the job's end.
  CHECK(describe(n.end(outcome(3))).empty());
  CHECK(describe(n.workers_stopped(1, {})) ==
        std::vector<std::string>{"end store round", "finish 69: lost the rendezvous"});
  CHECK(n.state() == State::kDone);
}

TEST_CASE("NodeRound: etcd: a new leader's round starts once the workers have stopped") {
  NodeRound n = in_state(State::kRunning);
  n.coordinator_lost("the rendezvous leader a was lost");
  CHECK(describe(n.assign(round_of(2, 0))).empty());
  CHECK(describe(n.assign(round_of(3, 1))).empty());  // the newest assignment wins
  CHECK(describe(n.workers_stopped(1, {})) ==
        std::vector<std::string>{"end store round", "report workers_stopped round 1 (0 more)", "start round 3"});
  CHECK(n.state() == State::kRunning);
  CHECK(n.round() == 3);
  CHECK(n.restarts() == 1);
}

TEST_CASE("NodeRound: etcd: a new leader's round that ends before it started is reported stopped, never started") {
  // The coordinator waits for every member's workers_stopped of the round it ended: a node that
  // dropped that stop as a past round's held the coordinator until its close_timeout.
  NodeRound n = in_state(State::kRunning);
  n.coordinator_lost("the rendezvous leader a was lost");
  n.assign(round_of(2));
  CHECK(describe(n.stop(2, StopReason::kMembershipChange, "node c joined")).empty());
  CHECK(describe(n.workers_stopped(1, {})) == std::vector<std::string>{
      "end store round", "report workers_stopped round 1 (0 more)", "report workers_stopped round 2 (0 more)"});
  CHECK(n.state() == State::kIdle);
  // A later assignment starts as from idle.
  CHECK(describe(n.assign(round_of(3))) == std::vector<std::string>{"start round 3"});
}

TEST_CASE("NodeRound: etcd: a round assigned by a leader since lost is not held") {
  NodeRound n = in_state(State::kStopping);
  n.assign(round_of(2));
  n.coordinator_lost("the rendezvous leader a was lost");
  CHECK(describe(n.workers_stopped(1, {})) ==
        std::vector<std::string>{"end store round", "report workers_stopped round 1 (0 more)"});
  CHECK(n.state() == State::kIdle);
}

TEST_CASE("NodeRound: the job ending overrides a waiting assignment") {
  NodeRound n = in_state(State::kStopping);
  n.assign(round_of(2));
  n.end(outcome(0));
  CHECK(describe(n.workers_stopped(1, {})) == std::vector<std::string>{"end store round", "finish 0"});
}

TEST_CASE("NodeRound: rejoining only before the first round") {
  NodeRound n;
  n.joined();
  n.rejoining();
  CHECK(n.state() == State::kJoining);
  CHECK_FALSE(n.had_round());
  n.joined();
  n.assign(round_of(1));
  n.workers_succeeded(1);
  n.stop(1, StopReason::kWorkerFailed, "x");
  REQUIRE(n.state() == State::kIdle);
  n.rejoining();
  CHECK(n.state() == State::kIdle);
  CHECK(n.had_round());
}
