// The single-node rendezvous (--nnodes=1): the same JobCoordinator as the multi-node one, so the
// restart budget and the job's outcome follow the same rules, but in-process, without sockets:
// each handler is posted on the io_context.
#pragma once

#include <asio.hpp>
#include <optional>

#include "core/backend_entry.hpp"
#include "core/coordinator_host.hpp"
#include "ddprun/rendezvous.hpp"
#include "core/event_loop.hpp"
#include "store/master_port.hpp"

namespace ddprun::elastic {

class LocalRendezvous final : public Rendezvous, private CoordinatorTransport {
 public:
  // `config` must have passed validate() and have max_nodes == 1; `master`: its backend's
  // MASTER_ADDR and MASTER_PORT for one node (core/backend_entry.hpp).
  LocalRendezvous(asio::io_context& io, RendezvousConfig config, OneNodeMaster master);

  void join(Handlers handlers) override;
  void worker_failed(int round, const WorkerFailure& failure) override;
  void workers_stopped(int round, const std::vector<WorkerFailure>& failures) override;
  void workers_succeeded(int round) override;
  void leave(int signal) override;
  // The job's one node: nothing goes on without it.
  void leave_quarantined(const std::string&) override { leave(0); }

 private:
  void deliver(const Messages& messages) override;

  static constexpr NodeId kThisNode = 1;
  asio::io_context& io_;
  RendezvousConfig config_;
  OneNodeMaster master_;
  Handlers handlers_;
  // The round starts as this node joins, and the launcher reporting its workers stopped is in
  // this process: only a restart's backoff is ever due.
  CoordinatorHost host_;
  std::optional<MasterPort> master_port_;
  bool left_ = false;
  Lifetime lifetime_;
};

}  // namespace ddprun::elastic
