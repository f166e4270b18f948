#include "core/node_round.hpp"

#include <utility>

#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic {

const char* to_string(NodeRound::State state) {
  switch (state) {
    case NodeRound::State::kJoining: return "joining";
    case NodeRound::State::kIdle: return "idle";
    case NodeRound::State::kRunning: return "running";
    case NodeRound::State::kStopping: return "stopping";
    case NodeRound::State::kSucceeded: return "succeeded";
    case NodeRound::State::kDone: return "done";
  }
  return "?";
}

NodeRound::Actions NodeRound::joined() {
  if (state_ == State::kJoining) state_ = State::kIdle;
  return {};
}

NodeRound::Actions NodeRound::rejoining() {
  if (state_ == State::kIdle && !had_round_) state_ = State::kJoining;
  return {};
}

NodeRound::Actions NodeRound::start(const RoundAssignment& assignment, Actions actions) {
  state_ = State::kRunning;
  round_ = assignment.round;
  restarts_ = assignment.restart_count;
  had_round_ = true;
  actions.push_back(StartWorkers{assignment});
  return actions;
}

NodeRound::Actions NodeRound::assign(const RoundAssignment& assignment) {
  switch (state_) {
    case State::kIdle:
      return start(assignment, {});
    case State::kSucceeded:
      // A new round with no stop before it (a new coordinator): the last one's store closes
      // first, as after a stop.
      return start(assignment, {EndStoreRound{}});
    case State::kStopping:
      // Only a coordinator that does not know this node is stopping sends one (a new etcd
      // leader): the round starts once the workers have stopped.
      assign_after_stop_ = assignment;
      return {};
    case State::kJoining:
    case State::kRunning:
    case State::kDone:
      return {};
  }
  return {};
}

NodeRound::Actions NodeRound::stop(int round, StopReason reason, const std::string& why) {
  if (round != round_) {
    // A waiting assignment's round, ended before this node's last workers had stopped (etcd: a
    // new leader's round that ended meanwhile): it never starts, and is reported stopped with
    // the last one, which the coordinator waits for. Any other is a past round's.
    if (state_ == State::kStopping && assign_after_stop_ && assign_after_stop_->round == round) {
      assign_after_stop_.reset();
      stopped_before_start_ = round;
    }
    return {};
  }
  if (state_ == State::kSucceeded) {
    // No workers to stop: the round's store takes no new connections, and that is all.
    state_ = State::kIdle;
    return {EndStoreRound{},
            Report{{{"type", "workers_stopped"}, {"round", round}, {"failures", nlohmann::json::array()}}}};
  }
  if (state_ != State::kRunning) return {};  // stopping already
  state_ = State::kStopping;
  return {StopWorkers{reason, why}};
}

NodeRound::Actions NodeRound::end(JobOutcome outcome) {
  switch (state_) {
    case State::kDone:
      return {};
    case State::kRunning: {
      state_ = State::kStopping;
      const std::string why = outcome.error.empty() ? "the job ended" : outcome.error;
      end_after_stop_ = std::move(outcome);
      return {StopWorkers{StopReason::kShutdown, why}};
    }
    case State::kStopping:
      if (!end_after_stop_) end_after_stop_ = std::move(outcome);
      return {};
    case State::kJoining:
    case State::kIdle:
    case State::kSucceeded:
      state_ = State::kDone;
      return {Finish{std::move(outcome)}};
  }
  return {};
}

NodeRound::Actions NodeRound::coordinator_lost(const std::string& why) {
  // A round it assigned may never be held: the next coordinator decides.
  assign_after_stop_.reset();
  stopped_before_start_.reset();
  switch (state_) {
    case State::kRunning:
      state_ = State::kStopping;
      return {StopWorkers{StopReason::kNodeLost, why}};
    case State::kSucceeded:
      // The workers are done; the next coordinator decides whether the job needs them again.
      state_ = State::kIdle;
      return {EndStoreRound{}};
    default:
      return {};
  }
}

NodeRound::Actions NodeRound::spare(int place, const std::string& why) {
  if (state_ != State::kIdle) return {};
  return {WaitAsSpare{place, why}};
}

NodeRound::Actions NodeRound::worker_failed(int round, const WorkerFailure& failure) {
  if (state_ != State::kRunning || round != round_) return {};
  state_ = State::kStopping;
  return {Report{{{"type", "worker_failed"}, {"round", round}, {"failure", failure}}}};
}

NodeRound::Actions NodeRound::workers_stopped(int round, const std::vector<WorkerFailure>& failures) {
  if (state_ != State::kStopping || round != round_) return {};
  state_ = State::kIdle;
  Actions actions{EndStoreRound{}};
  if (end_after_stop_) {
    state_ = State::kDone;
    actions.push_back(Finish{*std::exchange(end_after_stop_, std::nullopt)});
    return actions;
  }
  actions.push_back(Report{{{"type", "workers_stopped"}, {"round", round}, {"failures", failures}}});
  if (const auto never_started = std::exchange(stopped_before_start_, std::nullopt)) {
    actions.push_back(Report{{{"type", "workers_stopped"}, {"round", *never_started}, {"failures", nlohmann::json::array()}}});
  }
  if (assign_after_stop_) return start(*std::exchange(assign_after_stop_, std::nullopt), std::move(actions));
  return actions;
}

NodeRound::Actions NodeRound::workers_succeeded(int round) {
  if (state_ != State::kRunning || round != round_) return {};
  state_ = State::kSucceeded;  // the store goes on serving: workers elsewhere may still use it
  return {Report{{{"type", "workers_succeeded"}, {"round", round}}}};
}

NodeRound::Actions NodeRound::leave(int signal, std::string quarantined) {
  state_ = State::kDone;
  return {Leave{signal, std::move(quarantined)}};
}

}  // namespace ddprun::elastic
