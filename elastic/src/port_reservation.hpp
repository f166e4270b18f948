// A free TCP port held for this node's workers (MASTER_PORT when the node gets group rank 0).
#pragma once

#include <asio.hpp>

namespace ddprun::elastic {

// Holds a port free on every address of this host while it lives: a socket bound with
// SO_REUSEADDR to the wildcard address that never listens. Another bind without SO_REUSEADDR
// fails and the kernel hands the port to nobody else, but a worker's c10d TCPStore, which sets
// SO_REUSEADDR, can still bind and listen on it (tests/elastic/port_reservation_torch.sh checks
// this against torch). So there is no bind-then-close race as in torchrun.
class PortReservation {
 public:
  // Holds `port`, or a free port when it is 0. Throws std::system_error when no socket can be
  // bound (for a given port: another program holds it without SO_REUSEADDR, or listens on it).
  explicit PortReservation(asio::io_context& io, int port = 0);
  int port() const { return socket_.local_endpoint().port(); }

 private:
  asio::ip::tcp::acceptor socket_;
};

}  // namespace ddprun::elastic
