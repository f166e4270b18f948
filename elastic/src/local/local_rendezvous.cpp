#include "local/local_rendezvous.hpp"

#include <fmt/format.h>

#include "core/node_identity.hpp"

namespace ddprun::elastic {

LocalRendezvous::LocalRendezvous(asio::io_context& io, RendezvousConfig config, OneNodeMaster master)
    : io_(io),
      config_(std::move(config)),
      master_(std::move(master)),
      host_(io, job_settings(config_), *this, CoordinatorHost::Deadlines::kRestartBackoff) {}

void LocalRendezvous::join(Handlers handlers) {
  handlers_ = std::move(handlers);
  // One node: MASTER_ADDR is the static endpoint's host or --master_addr (127.0.0.1 unless
  // given), as with torchrun.
  const Endpoint& master = master_.at;
  try {
    master_port_.emplace(io_, master.port, config_.agent_store);
  } catch (const std::system_error& e) {
    std::string why = fmt::format("could not reserve a free port for MASTER_PORT: {}", e.what());
    if (master.port > 0 && master_.port_from_endpoint) {
      why = fmt::format("--rdzv_endpoint={}: port {} is in use by another program ({}); pick another port",
                        config_.endpoint, master.port, e.what());
    } else if (master.port > 0) {
      why = fmt::format("--master_port={} is in use by another program ({}); pick another or leave it out",
                        master.port, e.what());
    }
    return deliver({Finish{kThisNode, rendezvous_failure(why, 0)}});
  }
  host_.join(kThisNode, node_spec(config_, master.host, master_port_->port(), true), Joiner::kHost);
}

void LocalRendezvous::worker_failed(int round, const WorkerFailure& failure) {
  host_.receive(kThisNode, WorkerFailedReport{round, failure});
}

void LocalRendezvous::workers_stopped(int round, const std::vector<WorkerFailure>& failures) {
  master_port_->round_ended();
  host_.receive(kThisNode, WorkersStoppedReport{round, failures});
}

void LocalRendezvous::workers_succeeded(int round) {
  host_.receive(kThisNode, WorkersSucceededReport{round});
}

void LocalRendezvous::leave(int) {
  left_ = true;
  host_.halt();
}

void LocalRendezvous::deliver(const Messages& messages) {
  for (const Message& message : messages) {
    asio::post(io_, [this, alive = lifetime_.token(), message] {
      if (alive.expired() || left_) return;
      if (const auto* assign = std::get_if<Assign>(&message)) {
        master_port_->round_started(assign->assignment.agent_store);
        handlers_.start_round(assign->assignment);
      } else if (const auto* stop = std::get_if<Stop>(&message)) {
        handlers_.stop_round(stop->reason, stop->why);
      } else if (const auto* finish = std::get_if<Finish>(&message)) {
        handlers_.finish(finish->outcome);
      }  // never a Spare: the job's one node is always in the round
    });
  }
}

}  // namespace ddprun::elastic
