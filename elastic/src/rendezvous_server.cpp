#include "rendezvous_server.hpp"

#include <fmt/format.h>

#include <cstring>

#include "ddprun/exit_codes.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/rendezvous_protocol.hpp"

namespace ddprun::elastic {

namespace {

std::string describe(const asio::ip::tcp::endpoint& endpoint) {
  return fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
}

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

}  // namespace

RendezvousServer::RendezvousServer(asio::io_context& io, const asio::ip::tcp::endpoint& endpoint,
                                   JobSettings settings, const RendezvousTimeouts& timeouts)
    : acceptor_(io, endpoint, /*reuse_addr=*/true),
      timeouts_(timeouts),
      coordinator_(std::move(settings), monotonic_now()),
      deadline_timer_(io) {
  accept_next();
  wait_for_next_deadline();
}

RendezvousServer::~RendezvousServer() {
  for (auto& [node, connection] : connections_) connection.channel->close();
}

void RendezvousServer::accept_next() {
  acceptor_.async_accept([this, alive = lifetime_.token()](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (alive.expired() || ec == asio::error::operation_aborted) return;
    if (!ec && !shut_down_) {
      asio::error_code ignored;
      const std::string peer = describe(socket.remote_endpoint(ignored));
      const NodeId node = next_node_++;
      auto channel = std::make_shared<Channel>(std::move(socket), timeouts_, peer);
      connections_[node].channel = channel;
      channel->start([this, node](const nlohmann::json& message) { on_message(node, message); },
                     [this, node](const std::string& why) { on_closed(node, why); });
    }
    accept_next();
  });
}

void RendezvousServer::on_message(NodeId node, const nlohmann::json& message) {
  Connection& connection = connections_.at(node);
  try {
    handle(node, connection, message);
  } catch (const std::exception& e) {  // a message without the fields its type needs
    const std::string why = fmt::format("sent a bad '{}' message: {}", shown(message["type"].get<std::string>()), e.what());
    connection.channel->close();
    on_closed(node, why);
  }
}

void RendezvousServer::handle(NodeId node, Connection& connection, const nlohmann::json& message) {
  const std::string type = message.at("type");
  if (shut_down_) return;
  if (!connection.joined) {
    if (type != "join") throw std::invalid_argument("a node must join first");
    const int version = message.at("version");
    connection.joined = true;
    if (version != kProtocolVersion) {
      JobOutcome refusal;
      refusal.exit_code = exit_code::kRendezvous;
      refusal.error = fmt::format(
          "this node speaks rendezvous protocol version {} but the rendezvous host speaks version {}; run the "
          "same ddprun on every node",
          version, kProtocolVersion);
      send_finish(node, connection, refusal);
      return;
    }
    const NodeSpec spec = message.at("node");
    connection.hosts_rendezvous = spec.hosts_rendezvous;
    deliver(coordinator_.join(node, spec, monotonic_now()));
  } else if (type == "worker_failed") {
    deliver(coordinator_.worker_failed(node, message.at("round"), message.at("failure"), monotonic_now()));
  } else if (type == "workers_stopped") {
    deliver(coordinator_.workers_stopped(node, message.at("round"), message.at("failures"), monotonic_now()));
  } else if (type == "workers_succeeded") {
    deliver(coordinator_.workers_succeeded(node, message.at("round"), monotonic_now()));
  } else if (type == "leave") {
    const int signal = message.at("signal");
    connection.channel->close();
    connections_.erase(node);
    deliver(coordinator_.node_gone(node, "it left after " + signal_name(signal), monotonic_now()));
  } else {
    throw std::invalid_argument("unknown message type");
  }
}

void RendezvousServer::on_closed(NodeId node, const std::string& why) {
  const auto it = connections_.find(node);
  if (it == connections_.end()) return;
  const bool joined = it->second.joined;
  connections_.erase(it);
  if (joined && !shut_down_) deliver(coordinator_.node_gone(node, "it " + why, monotonic_now()));
  send_host_finish_when_others_closed();
}

void RendezvousServer::deliver(const Messages& messages) {
  for (const Message& message : messages) {
    const NodeId node = std::visit([](const auto& m) { return m.node; }, message);
    const auto it = connections_.find(node);
    if (it == connections_.end()) continue;
    if (const auto* finish = std::get_if<Finish>(&message)) {
      if (it->second.hosts_rendezvous && coordinator_.finished()) {
        host_finish_.emplace(node, finish->outcome);
      } else {
        send_finish(node, it->second, finish->outcome);
      }
    } else {
      it->second.channel->send(to_wire(message));
    }
  }
  send_host_finish_when_others_closed();
  wait_for_next_deadline();
}

void RendezvousServer::send_finish(NodeId node, Connection& connection, const JobOutcome& outcome) {
  connection.channel->send(to_wire(Finish{node, outcome}));
  connection.channel->finish_sending();
  connection.finished = true;
}

void RendezvousServer::send_host_finish_when_others_closed() {
  if (!host_finish_) return;
  for (const auto& [node, connection] : connections_) {
    if (node != host_finish_->first && connection.finished) return;
  }
  const auto host = connections_.find(host_finish_->first);
  if (host != connections_.end()) send_finish(host->first, host->second, host_finish_->second);
  host_finish_.reset();
}

void RendezvousServer::wait_for_next_deadline() {
  const std::optional<double> deadline = coordinator_.next_deadline();
  if (!deadline) {
    deadline_timer_.cancel();
    return;
  }
  deadline_timer_.expires_at(monotonic_time_point(*deadline));
  deadline_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (ec || alive.expired() || shut_down_) return;
    deliver(coordinator_.tick(monotonic_now()));
  });
}

void RendezvousServer::shutdown(const std::string& why) {
  if (shut_down_) return;
  shut_down_ = true;
  deadline_timer_.cancel();
  asio::error_code ignored;
  acceptor_.close(ignored);
  JobOutcome outcome;
  outcome.exit_code = exit_code::kRendezvous;
  outcome.error = why;
  for (auto& [node, connection] : connections_) {
    if (connection.joined && !connection.hosts_rendezvous && !connection.finished) {
      send_finish(node, connection, outcome);
    }
  }
}

}  // namespace ddprun::elastic
