#include "store/port_reservation.hpp"

#include <fcntl.h>

namespace ddprun::elastic {

namespace {

// Dual-stack [::] where the host has IPv6, so the port is held for IPv4 and IPv6 alike.
asio::ip::tcp::acceptor bind_wildcard(asio::io_context& io, unsigned short port) {
  asio::ip::tcp::acceptor socket(io);
  asio::error_code ec;
  socket.open(asio::ip::tcp::v6(), ec);
  if (!ec) socket.set_option(asio::ip::v6_only(false), ec);
  if (!ec) {
    socket.set_option(asio::socket_base::reuse_address(true));
    socket.bind({asio::ip::address_v6::any(), port}, ec);
    if (!ec) return socket;
    socket.close();
  }
  socket.open(asio::ip::tcp::v4());
  socket.set_option(asio::socket_base::reuse_address(true));
  socket.bind({asio::ip::address_v4::any(), port});
  return socket;
}

}  // namespace

PortReservation::PortReservation(asio::io_context& io, int port)
    : socket_(bind_wildcard(io, static_cast<unsigned short>(port))),
      protocol_(socket_.local_endpoint().protocol()),
      port_(socket_.local_endpoint().port()) {
  ::fcntl(socket_.native_handle(), F_SETFD, FD_CLOEXEC);
}

}  // namespace ddprun::elastic
