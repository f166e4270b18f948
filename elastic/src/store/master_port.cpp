#include "store/master_port.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace ddprun::elastic {

namespace {

// Half the descriptors this process may open (the soft RLIMIT_NOFILE), at least 64: every
// worker of the job is a client (several each, in some PyTorch versions), and the other half
// stays for the rendezvous, the workers' pipes and what the launcher opens.
std::size_t store_connection_limit() {
  struct rlimit files {};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const rlim_t soft = files.rlim_cur == RLIM_INFINITY ? rlim_t{1} << 20 : files.rlim_cur;
  return std::max<std::size_t>(64, static_cast<std::size_t>(soft / 2));
}

}  // namespace

MasterPort::MasterPort(asio::io_context& io, int port, bool agent_store)
    : reservation_(std::make_unique<PortReservation>(io, port)) {
  port_ = reservation_->port();
  if (!agent_store) return;
  const asio::ip::tcp protocol = reservation_->protocol();
  store_ = std::make_unique<AgentStoreServer>(protocol, reservation_->release(), store_connection_limit());
  reservation_.reset();
}

void MasterPort::round_started(bool serve_store) {
  if (store_) store_->reset(serve_store);
}

void MasterPort::round_ended() {
  if (store_) store_->hold_new_connections();
}

}  // namespace ddprun::elastic
