// A free TCP port held for this node's workers (MASTER_PORT when the node gets group rank 0).
#pragma once

#include <asio.hpp>

namespace ddprun::elastic {

// Holds a port free on every address of this host while it lives: a socket bound with
// SO_REUSEADDR to the wildcard address that never listens. Another bind without SO_REUSEADDR
// fails and the kernel hands the port to nobody else, but a worker's c10d TCPStore, which sets
// SO_REUSEADDR, can still bind and listen on it (tests/launcher/contract_test.sh checks this
// with a worker that binds as c10d's TCPStore does). So there is no bind-then-close race as in
// torchrun. The socket is close-on-exec: workers do not inherit it.
class PortReservation {
 public:
  // Holds `port`, or a free port when it is 0. Throws std::system_error when no socket can be
  // bound (for a given port: another program holds it without SO_REUSEADDR, or listens on it).
  explicit PortReservation(asio::io_context& io, int port = 0);
  int port() const { return port_; }
  asio::ip::tcp protocol() const { return protocol_; }

  // Hands the bound socket over to whoever serves the port (the agent store); the caller owns
  // the descriptor from now on, and the port stays held as long as it keeps it open.
  int release() { return socket_.release(); }

 private:
  asio::ip::tcp::acceptor socket_;
  asio::ip::tcp protocol_;
  int port_;
};

}  // namespace ddprun::elastic
