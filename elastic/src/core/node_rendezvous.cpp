#include "core/node_rendezvous.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/fence.hpp"
#include "core/node_identity.hpp"
#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic {

bool NodeRendezvous::start_joining(Handlers handlers, const RendezvousConfig& config) {
  handlers_ = std::move(handlers);
  nproc_ = config.nproc;
  try {
    master_port_.emplace(io_, 0, config.agent_store);
  } catch (const std::system_error& e) {
    fail(fmt::format("could not reserve a free port for MASTER_PORT: {}", e.what()));
    return false;
  }
  return true;
}

void NodeRendezvous::apply(NodeRound::Actions actions) {
  for (auto& action : actions) {
    if (auto* start = std::get_if<NodeRound::StartWorkers>(&action)) {
      if (fence_passed()) {
        // The job may already have re-formed without this node (the assignment came late): no
        // worker starts; the fence ends the job here, and NodeRound, which counts this round's
        // workers as started, hears that they stopped (none did start).
        const int round = start->assignment.round;
        fence();
        return apply(round_.workers_stopped(round, {}));
      }
      const RoundAssignment& a = start->assignment;
      master_port_->round_started(a.group_rank == 0 && a.agent_store);
      // Checked again when the launcher would start them: a launcher stopped in between (SIGSTOP,
      // a stall) runs this only when it runs again, maybe past the fence.
      post([this, a](Handlers& h) {
        if (!fence_passed()) return h.start_round(a);
        fence(Workers::kNoneStarted);
        apply(round_.workers_stopped(a.round, {}));
      });
    } else if (auto* stop = std::get_if<NodeRound::StopWorkers>(&action)) {
      post([reason = stop->reason, why = stop->why](Handlers& h) { h.stop_round(reason, why); });
    } else if (std::holds_alternative<NodeRound::EndStoreRound>(action)) {
      master_port_->round_ended();
    } else if (auto* message = std::get_if<NodeRound::Report>(&action)) {
      report(message->message);
    } else if (auto* finish = std::get_if<NodeRound::Finish>(&action)) {
      drop_fence();
      release();
      post([outcome = std::move(finish->outcome)](Handlers& h) { h.finish(outcome); });
    } else if (auto* spare = std::get_if<NodeRound::WaitAsSpare>(&action)) {
      post([place = spare->place, why = spare->why](Handlers& h) {
        if (h.spare) h.spare(place, why);
      });
    } else if (auto* leave = std::get_if<NodeRound::Leave>(&action)) {
      left_ = true;
      drop_fence();
      release();
      leave_job(leave->signal, leave->quarantined);
    }
  }
}

void NodeRendezvous::coordinator_heard(std::chrono::steady_clock::time_point sent_at, double lifetime,
                                       const std::string& coordinator) {
  if (fenced_ || (fence_at_ && sent_at <= heard_at_)) return;
  heard_at_ = sent_at;
  fence_lifetime_ = lifetime;
  fence_coordinator_ = coordinator;
  fence_at_ = fence_deadline(sent_at, lifetime);
  if (!fence_timer_armed_) wait_for_fence();
  post([at = FenceDeadlines{*fence_at_, backstop_deadline(sent_at, lifetime)}](Handlers& h) {
    if (h.fence_moved) h.fence_moved(at);
  });
}

void NodeRendezvous::drop_fence() {
  if (fence_at_) {
    post([](Handlers& h) {
      if (h.fence_moved) h.fence_moved(std::nullopt);
    });
  }
  fence_at_.reset();
  fence_timer_.cancel();
}

bool NodeRendezvous::fence_passed() const { return fence_at_ && std::chrono::steady_clock::now() >= *fence_at_; }

// The deadline moves later with every acknowledgement (every second or so): the timer is not
// re-armed for each, but waits again for what is left when it fires early.
void NodeRendezvous::wait_for_fence() {
  fence_timer_armed_ = true;
  fence_timer_.expires_at(*fence_at_);
  fence_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (alive.expired()) return;
    fence_timer_armed_ = false;
    if (ec || !fence_at_) return;
    if (!fence_passed()) return wait_for_fence();
    if (workers_may_run()) fence();
  });
}

void NodeRendezvous::fence(Workers workers) {
  const auto now = std::chrono::steady_clock::now();
  const double silent = std::chrono::duration<double>(now - heard_at_).count();
  const char* what = workers == Workers::kEnded         ? "this node's workers have ended"
                     : workers == Workers::kNoneStarted ? "this node starts no workers"
                                                        : "killing this node's workers (SIGKILL)";
  say(fmt::format("ddprun: fencing: {}: {} acknowledged nothing for {:.1f} s\n", what, fence_coordinator_, silent));
  const double left = fence_lifetime_ - silent;
  const std::string why = fmt::format(
      "lost {}: it acknowledged nothing this node sent for {:.1f} s and may {} (--rdzv_conf heartbeat_timeout={}); "
      "this node's workers were killed first (fenced)",
      fence_coordinator_, silent,
      left > 0.05 ? fmt::format("count this node lost {:.1f} s from now", left) : "have counted this node lost",
      fence_lifetime_);
  // The connection stays open until the launcher exits, once the workers are gone: a coordinator
  // that still hears this node one way would count it lost at the connection's end, at once.
  drop_fence();
  fenced_ = true;
  post([why](Handlers& h) {
    if (h.fence) h.fence(why);
  });
  fail(why);
}

// Past the fence, whatever else happened (the coordinator closed the connection, a worker died of
// the orphan guard's SIGKILL: a launcher that was stopped sees them when it runs again), the
// fence is what ends the job here.
void NodeRendezvous::fail(const std::string& why) {
  if (fence_passed() && workers_may_run()) return fence();
  end(rendezvous_failure(why, round_.restarts()));
}

bool NodeRendezvous::workers_may_run() const {
  return round_.state() == NodeRound::State::kRunning || round_.state() == NodeRound::State::kStopping;
}

void NodeRendezvous::handle_message(const nlohmann::json& message, const std::function<void(JobOutcome)>& finish) {
  const std::string type = message.at("type");
  if (type == "assign") {
    const RoundAssignment assignment = message.at("assignment");
    check_assignment(assignment, nproc_);
    apply(round_.assign(assignment));
  } else if (type == "stop") {
    apply(round_.stop(message.at("round"), parse_stop_reason(message.at("reason").get<std::string>()),
                      message.at("why")));
  } else if (type == "spare") {
    apply(round_.spare(message.at("place"), message.at("why")));
  } else if (type == "finish") {
    JobOutcome outcome = message.at("outcome");
    check_outcome(outcome);
    finish(std::move(outcome));
  } else {
    throw std::invalid_argument("unknown message type '" + type + "'");
  }
}

void NodeRendezvous::say(const std::string& line) const {
  if (handlers_.say) handlers_.say(line);
}

void NodeRendezvous::worker_failed(int round, const WorkerFailure& failure) {
  if (fence_passed() && workers_may_run()) return fence();  // not a failure to restart the job for
  apply(round_.worker_failed(round, failure));
}

void NodeRendezvous::workers_stopped(int round, const std::vector<WorkerFailure>& failures) {
  // Past the fence (a launcher that ran again past it stopped forking, or its workers stopped
  // while it was cut off), the coordinator may have given this node's ranks away: fenced. The
  // workers have stopped all the same, and NodeRound must hear it: the launcher, which has no
  // workers left, reports it only this once, and the job's end waits for it.
  if (fence_passed() && workers_may_run()) fence(Workers::kEnded);
  apply(round_.workers_stopped(round, failures));
}

void NodeRendezvous::workers_succeeded(int round) { apply(round_.workers_succeeded(round)); }

void NodeRendezvous::leave(int signal) { apply(round_.leave(signal)); }

void NodeRendezvous::leave_quarantined(const std::string& why) { apply(round_.leave(0, why)); }

}  // namespace ddprun::elastic
