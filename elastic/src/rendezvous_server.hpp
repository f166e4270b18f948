// The job's rendezvous server, hosted inside one launcher process on its io_context: accepts
// nodes over TCP (rendezvous_protocol.hpp) and drives the JobCoordinator with what they say,
// with lost connections and heartbeats, and with its deadlines.
#pragma once

#include <asio.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "channel.hpp"
#include "ddprun/job_coordinator.hpp"
#include "event_loop.hpp"

namespace ddprun::elastic {

class RendezvousServer {
 public:
  // Listens on `endpoint` at once; throws std::system_error when it cannot (e.g. the address
  // is in use). The join timeout starts now.
  RendezvousServer(asio::io_context& io, const asio::ip::tcp::endpoint& endpoint, JobSettings settings,
                   const RendezvousTimeouts& timeouts);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }

  // The hosting launcher is going away: every other node gets a finish with `why` as the
  // rendezvous error, and nothing more happens.
  void shutdown(const std::string& why);

 private:
  struct Connection {
    std::shared_ptr<Channel> channel;
    bool joined = false;
    bool hosts_rendezvous = false;  // the connection of the launcher this server runs in
    bool finished = false;          // got its finish; waiting for it to close
  };

  void accept_next();
  void on_message(NodeId node, const nlohmann::json& message);
  void handle(NodeId node, Connection& connection, const nlohmann::json& message);
  void on_closed(NodeId node, const std::string& why);
  void deliver(const Messages& messages);
  void send_finish(NodeId node, Connection& connection, const JobOutcome& outcome);
  void send_host_finish_when_others_closed();
  void wait_for_next_deadline();

  asio::ip::tcp::acceptor acceptor_;
  RendezvousTimeouts timeouts_;
  JobCoordinator coordinator_;
  asio::steady_timer deadline_timer_;
  std::map<NodeId, Connection> connections_;
  NodeId next_node_ = 1;
  // The hosting launcher's own finish waits until every other node has read its finish and
  // closed: once the host's launcher has it, it exits and takes this server with it.
  std::optional<std::pair<NodeId, JobOutcome>> host_finish_;
  bool shut_down_ = false;
  Lifetime lifetime_;
};

}  // namespace ddprun::elastic
