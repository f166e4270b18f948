#include "store/master_port.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace ddprun::elastic {

namespace {

// Every worker of the job is a client (several each, in some PyTorch versions): the store may
// keep all the descriptors this process may open (the soft RLIMIT_NOFILE, which the launcher
// raised to the hard one) but an eighth, and at least 256, kept for the rendezvous, the
// workers' pipes and what the launcher opens; at least 64. Half, before, kept a 16,384-rank job
// out of a host whose ulimit -n is 20,000 (scripts/bench/store_scale.py).
std::size_t store_connection_limit() {
  struct rlimit files {};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const rlim_t soft = files.rlim_cur == RLIM_INFINITY ? rlim_t{1} << 20 : files.rlim_cur;
  const rlim_t kept = std::max<rlim_t>(256, soft / 8);
  return std::max<std::size_t>(64, soft > kept ? static_cast<std::size_t>(soft - kept) : 0);
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
