// A free TCP port, held until the workers have bound it.
//
// Picking a port by binding port 0 and closing the socket races with every other program
// on the host (torchrun's "address already in use"). A reservation keeps the socket bound,
// with SO_REUSEADDR and without listening: the kernel hands the port to no one else, while a
// worker's store (c10d's TCPStore also sets SO_REUSEADDR) can still bind and listen on it.
#pragma once

#include <string>

namespace ddprun::elastic {

class PortReservation {
 public:
  PortReservation() = default;
  // Reserves `port` on `host` (a numeric IPv4/IPv6 address or a name), or a free one when
  // `port` is 0. Throws std::system_error naming the address when it cannot bind.
  static PortReservation reserve(const std::string& host, int port = 0);

  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&& other) noexcept;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation();

  int port() const { return port_; }
  void release();

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ddprun::elastic
