// The job's rendezvous server, hosted inside one launcher process on its io_context: accepts
// nodes over TCP (rendezvous_protocol.hpp) and drives the JobCoordinator with what they say,
// with lost connections and heartbeats, and with its deadlines. With a secret, a connection
// speaks only the handshake of rendezvous_auth.hpp until it has proved that it knows it; a
// connection that has not authenticated (without a secret: joined) within auth_timeout is
// closed, and nothing about the job is told to it before.
#pragma once

#include <asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "tcp/channel.hpp"
#include "auth/munge_auth.hpp"
#include "auth/rendezvous_auth.hpp"
#include "core/coordinator_host.hpp"
#include "core/event_loop.hpp"
#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic {

class RendezvousServer final : private CoordinatorTransport {
 public:
  // Listens on `endpoint` at once; throws std::system_error when it cannot (e.g. the address
  // is in use). The join timeout starts now.
  // `auth`: the job's secret, MUNGE, or neither (open, as torchrun's). At most
  // `max_connections` connections at once: a new one closes the oldest that has not joined
  // when that one has been connected for a second, else it is refused with a message naming
  // max_connections and `fd_limit` (the host's ulimit -n), and the node ends (exit 69). `say`
  // gets the host's lines for its console (out of descriptors, a refused connection, the cap
  // reached: each once or a few times).
  RendezvousServer(asio::io_context& io, const asio::ip::tcp::endpoint& endpoint, JobSettings settings,
                   const RendezvousTimeouts& timeouts, NodeAuth auth, int max_connections, long fd_limit,
                   std::function<void(const std::string& line)> say);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }

  // The connection whose source is `source` (address and port) is the hosting launcher's own:
  // its TcpRendezvous calls this once connected, before it sends anything. The server knows
  // its host so, by where a connection comes from, never by what a node says: no other socket
  // can have that source while this one is open.
  void expect_own_connection(const asio::ip::tcp::endpoint& source) { own_source_ = source; }

  // Called, on the loop, whenever the job's spares or quarantined nodes change.
  void on_membership(std::function<void(const JobMembership&)> handler) { on_membership_ = std::move(handler); }

  // The hosting launcher is going away: every other node gets a finish with `why` as the
  // rendezvous error, and nothing more happens.
  void shutdown(const std::string& why);

 private:
  struct Connection {
    std::shared_ptr<Channel> channel;
    asio::ip::tcp::endpoint source;  // the peer's address and port
    std::optional<Handshake> handshake;  // with a secret or MUNGE, until it has authenticated
    bool authenticated = false;
    bool joined = false;
    bool hosts_rendezvous = false;  // the connection of the launcher this server runs in (own_source_)
    bool finished = false;          // got its finish; waiting for it to close
    int nproc = 0;                  // its workers, from its join
    double connected = 0;           // monotonic seconds when it was accepted
    std::optional<RoundAssignment> round;  // its latest round, as assigned to it
  };

  void accept_next();
  void accept_pending();
  void admit(asio::ip::tcp::socket socket, const asio::ip::tcp::endpoint& source);
  void close_unjoined_at_deadline();
  void accept_one_at_fd_limit();
  void make_room();
  void refuse_over_cap(asio::ip::tcp::socket socket);
  void authenticate(NodeId node, Connection& connection, const std::string& type, const nlohmann::json& message);
  void refuse(NodeId node, Connection& connection, const std::string& why);
  void report_refusal(const Connection& connection, const std::string& why);
  void turn_away_torchrun(NodeId node, bool from_torchrun);
  void join(NodeId node, Connection& connection, const nlohmann::json& message);
  // The coordinator has answered the join of joining_: the node is in the job, or refused.
  void settle_join(const Messages& answer);
  bool refused_other_version(NodeId node, Connection& connection, const nlohmann::json& message);
  void on_message(NodeId node, const nlohmann::json& message);
  void handle(NodeId node, Connection& connection, const nlohmann::json& message);
  void on_closed(NodeId node, const std::string& why);
  void deliver(const Messages& messages) override;
  void membership_changed(const JobMembership& membership) override;
  void send_finish(NodeId node, Connection& connection, const JobOutcome& outcome);
  void send_host_finish_when_others_closed();

  asio::ip::tcp::acceptor acceptor_;
  RendezvousTimeouts timeouts_;
  NodeAuth auth_;
  std::function<void(const std::string& line)> say_;
  std::size_t max_connections_;
  long fd_limit_;
  // A descriptor held open so that, when the process runs out, it can be closed to accept and
  // close a pending connection instead of spinning on EMFILE (see accept_one_at_fd_limit).
  int reserve_fd_ = -1;
  asio::steady_timer accept_pause_;
  CoordinatorHost host_;
  BroadcastLines broadcast_lines_;  // the lines of a round's assigns and stops, serialised once
  std::map<NodeId, Connection> connections_;
  std::set<NodeId> unjoined_;  // those of connections_ that have not joined, oldest first
  asio::steady_timer auth_timer_;  // the oldest of unjoined_ reaches auth_timeout
  // Connections refused at the cap, until the node has read why and closed.
  std::set<std::shared_ptr<Channel>> refused_;
  NodeId next_node_ = 1;
  std::optional<asio::ip::tcp::endpoint> own_source_;  // see expect_own_connection
  // The hosting launcher's own finish waits until every other node has read its finish and
  // closed: once the host's launcher has it, it exits and takes this server with it.
  std::optional<std::pair<NodeId, JobOutcome>> host_finish_;
  std::function<void(const JobMembership&)> on_membership_;
  // The node whose join the coordinator is answering, and whether it is this host's own.
  std::optional<std::pair<NodeId, Joiner>> joining_;
  bool shut_down_ = false;
  int refusals_reported_ = 0;
  bool fd_limit_reported_ = false;
  bool cap_reported_ = false;
  bool torchrun_reported_ = false;
  Lifetime lifetime_;
};

}  // namespace ddprun::elastic
