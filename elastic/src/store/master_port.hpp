// This node's MASTER_PORT, from join to the end of the job: held free for the workers and,
// with the agent store, served by the launcher itself while its node hosts global rank 0.
#pragma once

#include <asio.hpp>
#include <memory>

#include "store/agent_store_server.hpp"
#include "store/port_reservation.hpp"

namespace ddprun::elastic {

// With `agent_store` (torchrun's TORCHELASTIC_USE_AGENT_STORE=True) the port listens from the
// start, and is served by an AgentStoreServer in the rounds in which this node hosts global
// rank 0, where every worker is a client of it: the port is never free for another program to
// take, and the store outlives any worker. Without it, the port is only held, and rank 0 of
// the workers binds it for its own store.
//
// The rounds: round_started() before the node's workers start; round_ended() once the round is
// over for this node and before the rendezvous hears of it, so before any node can start the
// next round: when its workers have stopped, or when, after they succeeded, the round is
// stopped anyway (a failure elsewhere). A round's store starts empty, and connections made
// after round_ended() (by workers of the next round, on any node) wait until it is emptied: a
// restarted job never sees the keys of the previous attempt, even where its clients use no
// per-attempt prefix (torch 2.x). Workers that succeeded end nothing: other nodes' workers may
// still connect.
class MasterPort {
 public:
  // Holds `port`, or a free port when it is 0. Throws std::system_error when it cannot be held
  // or listened on.
  MasterPort(asio::io_context& io, int port, bool agent_store);

  int port() const { return port_; }

  // `serve_store`: this node hosts global rank 0 and the round's workers use the agent store.
  void round_started(bool serve_store);
  void round_ended();

 private:
  int port_;
  std::unique_ptr<PortReservation> reservation_;  // without the agent store
  std::unique_ptr<AgentStoreServer> store_;       // with it
};

}  // namespace ddprun::elastic
