// The rendezvous of a single-node job: no sockets, no waiting. Rounds start at once; the
// restart budget is counted here as it is for a multi-node job.
#pragma once

#include <string>

#include <asio/io_context.hpp>

#include "ddprun/port_reservation.hpp"
#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

struct LocalRendezvousOptions {
  std::string run_id;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;      // 0: a free port, reserved anew for every round
  int nproc = 1;
  int max_restarts = 0;
};

class LocalRendezvous : public Rendezvous {
 public:
  LocalRendezvous(asio::io_context& io, LocalRendezvousOptions options);

  void join(Handlers handlers) override;
  void worker_failed(int round, const WorkerFailure& failure) override;
  void workers_stopped(int round, const std::vector<WorkerFailure>& failures) override;
  void workers_succeeded(int round) override;
  void leave(int signal) override;

 private:
  void start_round();

  asio::io_context& io_;
  LocalRendezvousOptions options_;
  Handlers handlers_;
  int round_ = -1;
  int restarts_ = 0;
  bool left_ = false;
  std::vector<WorkerFailure> failures_;  // of the current round, first failure first
  PortReservation port_;
};

}  // namespace ddprun::elastic
