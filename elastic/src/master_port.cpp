#include "master_port.hpp"

namespace ddprun::elastic {

MasterPort::MasterPort(asio::io_context& io, int port, bool agent_store)
    : reservation_(std::make_unique<PortReservation>(io, port)) {
  port_ = reservation_->port();
  if (!agent_store) return;
  const asio::ip::tcp protocol = reservation_->protocol();
  store_ = std::make_unique<AgentStoreServer>(protocol, reservation_->release());
  reservation_.reset();
}

void MasterPort::round_started(bool serve_store) {
  if (store_) store_->reset(serve_store);
}

void MasterPort::round_ended() {
  if (store_) store_->hold_new_connections();
}

}  // namespace ddprun::elastic
