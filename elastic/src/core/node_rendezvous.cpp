#include "core/node_rendezvous.hpp"

#include <fmt/format.h>

#include <iostream>

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
      const RoundAssignment& a = start->assignment;
      master_port_->round_started(a.group_rank == 0 && a.agent_store);
      post([a](Handlers& h) { h.start_round(a); });
    } else if (auto* stop = std::get_if<NodeRound::StopWorkers>(&action)) {
      post([reason = stop->reason, why = stop->why](Handlers& h) { h.stop_round(reason, why); });
    } else if (std::holds_alternative<NodeRound::EndStoreRound>(action)) {
      master_port_->round_ended();
    } else if (auto* message = std::get_if<NodeRound::Report>(&action)) {
      report(message->message);
    } else if (auto* finish = std::get_if<NodeRound::Finish>(&action)) {
      release();
      post([outcome = std::move(finish->outcome)](Handlers& h) { h.finish(outcome); });
    } else if (auto* spare = std::get_if<NodeRound::WaitAsSpare>(&action)) {
      post([place = spare->place, why = spare->why](Handlers& h) {
        if (h.spare) h.spare(place, why);
      });
    } else if (auto* leave = std::get_if<NodeRound::Leave>(&action)) {
      left_ = true;
      release();
      leave_job(leave->signal);
    }
  }
}

void NodeRendezvous::fail(const std::string& why) { end(rendezvous_failure(why, round_.restarts())); }

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
  if (handlers_.say) return handlers_.say(line);
  std::cerr << line;
}

void NodeRendezvous::worker_failed(int round, const WorkerFailure& failure) {
  apply(round_.worker_failed(round, failure));
}

void NodeRendezvous::workers_stopped(int round, const std::vector<WorkerFailure>& failures) {
  apply(round_.workers_stopped(round, failures));
}

void NodeRendezvous::workers_succeeded(int round) { apply(round_.workers_succeeded(round)); }

void NodeRendezvous::leave(int signal) { apply(round_.leave(signal)); }

}  // namespace ddprun::elastic
