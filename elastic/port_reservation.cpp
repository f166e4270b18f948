#include "ddprun/port_reservation.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace ddprun::elastic {

PortReservation PortReservation::reserve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw std::system_error(EADDRNOTAVAIL, std::generic_category(),
                            fmt::format("cannot resolve {} to reserve a port: {}", host, ::gai_strerror(rc)));
  }
  int error = EADDRNOTAVAIL;
  PortReservation r;
  for (addrinfo* a = found; a != nullptr && r.fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      error = errno;
      ::close(fd);
      continue;
    }
    r.fd_ = fd;
    r.port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                                : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  }
  ::freeaddrinfo(found);
  if (r.fd_ < 0) {
    throw std::system_error(error, std::generic_category(),
                            fmt::format("cannot reserve port {} on {}", port, host));
  }
  return r;
}

PortReservation::PortReservation(PortReservation&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(std::exchange(other.port_, 0)) {}

PortReservation& PortReservation::operator=(PortReservation&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    port_ = std::exchange(other.port_, 0);
  }
  return *this;
}

PortReservation::~PortReservation() { release(); }

void PortReservation::release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace ddprun::elastic
