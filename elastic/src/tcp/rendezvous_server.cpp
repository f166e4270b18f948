#include "tcp/rendezvous_server.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "ddprun/exit_codes.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/system.hpp"
#include "core/node_report.hpp"
#include "store/listen_backlog.hpp"
#include "core/rendezvous_protocol.hpp"
#include "store/tcpstore_greeting.hpp"

namespace ddprun::elastic {

namespace {

std::string describe(const asio::ip::tcp::endpoint& endpoint) {
  return fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
}

std::string version_mismatch(const nlohmann::json& version) {
  return fmt::format(
      "this node speaks rendezvous protocol version {} but the rendezvous host speaks version {}; run the same "
      "ddprun on every node",
      shown(version.dump()), kProtocolVersion);
}

// The same address and port; an IPv4 peer of a dual-stack socket shows as ::ffff:a.b.c.d.
bool same_source(const asio::ip::tcp::endpoint& a, const asio::ip::tcp::endpoint& b) {
  const auto plain = [](const asio::ip::address& address) -> asio::ip::address {
    if (address.is_v6() && address.to_v6().is_v4_mapped()) {
      return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
    }
    return address;
  };
  return a.port() == b.port() && plain(a.address()) == plain(b.address());
}

// Refusals reported on the host's stderr; more are counted silently (a flood must not fill it).
constexpr int kMaxRefusalsReported = 10;
// After running out of descriptors, accepting waits this long before it tries again.
constexpr double kFdLimitPause = 0.05;
// At the cap, a connection that has not joined is closed to make room only once it has been
// connected this long: a real node joins within milliseconds of connecting, so the one closed
// is an idle one, never a node caught between its connect and its join (which would connect
// again, and, with more nodes than the cap, again and again).
constexpr double kJoinGrace = 1.0;

// A failure reported over a node's connection must be, for its current round, one of that
// node's own workers (read_report checked its range; reports about other rounds change nothing
// in the coordinator).
void check_own(const NodeReport& report, int nproc, const std::optional<RoundAssignment>& round) {
  const ReportedFailures reported = reported_failures(report);
  if (reported.failures.empty() || (round && reported.round != round->round)) return;
  for (const WorkerFailure* failure : reported.failures) {
    if (!round || failure->group_rank != round->group_rank || failure->rank < round->base_rank ||
        failure->rank >= round->base_rank + nproc) {
      throw std::invalid_argument(fmt::format("it reports worker rank {} of node group rank {}, not one of its own",
                                              failure->rank, failure->group_rank));
    }
  }
}

}  // namespace

RendezvousServer::RendezvousServer(asio::io_context& io, const asio::ip::tcp::endpoint& endpoint,
                                   JobSettings settings, const RendezvousTimeouts& timeouts, NodeAuth auth,
                                   int max_connections, long fd_limit,
                                   std::function<void(const std::string& line)> say)
    : acceptor_(io, endpoint, /*reuse_addr=*/true),
      timeouts_(timeouts),
      auth_(std::move(auth)),
      say_(std::move(say)),
      max_connections_(static_cast<std::size_t>(std::max(1, max_connections))),
      fd_limit_(fd_limit),
      reserve_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)),
      accept_pause_(io),
      host_(io, std::move(settings), *this),
      auth_timer_(io) {
  // Workers must not inherit the rendezvous port or its connections: a worker holding a copy
  // would keep a connection open after this server closed it.
  ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  acceptor_.set_option(asio::ip::tcp::no_delay(true));  // every accepted connection's (Channel::NoDelay)
  acceptor_.non_blocking(true);  // accept_pending takes connections until there are none
  acceptor_.listen(kListenBacklog);  // again: asio's constructor listened with SOMAXCONN
  accept_next();
}

RendezvousServer::~RendezvousServer() {
  for (auto& [node, connection] : connections_) connection.channel->close();
  for (const auto& channel : refused_) channel->close();
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

void RendezvousServer::accept_next() {
  acceptor_.async_wait(asio::ip::tcp::acceptor::wait_read, [this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (alive.expired() || ec == asio::error::operation_aborted || shut_down_) return;
    accept_pending();
  });
}

// Takes every connection the kernel has queued, in one turn of the loop: thousands of nodes
// connect within moments of each other, and a listen queue that overflows (net.core.somaxconn,
// 4096 here) drops connections, which the nodes' kernels try again only a second later.
// accept4 gives the descriptor close-on-exec (workers must not inherit it) and the peer's
// address without more system calls.
void RendezvousServer::accept_pending() {
  for (;;) {
    asio::ip::tcp::endpoint source;
    socklen_t length = static_cast<socklen_t>(source.capacity());
    const int fd = ::accept4(acceptor_.native_handle(), source.data(), &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) return accept_one_at_fd_limit();
      break;  // nothing pending (EAGAIN), or the kernel short of memory: wait for the next readiness
    }
    source.resize(length);
    asio::error_code ec;
    asio::ip::tcp::socket socket(acceptor_.get_executor());
    socket.assign(source.protocol(), fd, ec);
    if (ec) {
      ::close(fd);
      continue;
    }
    admit(std::move(socket), source);
  }
  accept_next();
}

void RendezvousServer::admit(asio::ip::tcp::socket socket, const asio::ip::tcp::endpoint& source) {
  make_room();
  if (connections_.size() >= max_connections_) return refuse_over_cap(std::move(socket));
  const NodeId node = next_node_++;
  auto channel = std::make_shared<Channel>(std::move(socket), timeouts_, describe(source), Channel::NoDelay::kInherited);
  Connection& connection = connections_[node];
  connection.source = source;
  connection.connected = monotonic_seconds();
  connection.channel = channel;
  connection.authenticated = !auth_.required();
  unjoined_.insert(node);
  if (unjoined_.size() == 1) close_unjoined_at_deadline();
  if (auth_.required()) channel->hold_heartbeats_until_authenticated();
  channel->answer_heartbeats();
  channel->answer_tcpstore_clients([this, node](const std::string& greeting) {
    turn_away_torchrun(node, !is_ddprun_probe(greeting));
  });
  channel->start([this, node](const nlohmann::json& message) { on_message(node, message); },
                 [this, node](const std::string& why) { on_closed(node, why); });
}

// One timer for every connection that has not joined: they are accepted, and so reach their
// auth_timeout, in the order of their ids (unjoined_'s), so the oldest one's deadline is the next.
// A timer per connection cost 10,000 timers, each firing to find its node joined long ago.
void RendezvousServer::close_unjoined_at_deadline() {
  while (!unjoined_.empty()) {
    const auto it = connections_.find(*unjoined_.begin());
    const double deadline = it->second.connected + timeouts_.auth_timeout;
    if (deadline > monotonic_seconds()) {
      auth_timer_.expires_at(monotonic_time_point(deadline));
      auth_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
        if (!ec && !alive.expired()) close_unjoined_at_deadline();
      });
      return;
    }
    it->second.channel->close();
    connections_.erase(it);
    unjoined_.erase(unjoined_.begin());
    send_host_finish_when_others_closed();
  }
}

void RendezvousServer::make_room() {
  if (connections_.size() < max_connections_ || unjoined_.empty()) return;
  const NodeId oldest = *unjoined_.begin();
  Connection& connection = connections_.at(oldest);
  if (monotonic_seconds() - connection.connected < kJoinGrace) return;
  connection.channel->close();
  connections_.erase(oldest);
  unjoined_.erase(oldest);
}

// Every connection the host may keep is taken by a node that has joined or is joining: this
// node is told why, once, and ends (exit 69) rather than connecting again and again. The
// refusal lingers outside the cap until the node has read it and closed (at most
// heartbeat_timeout), so that closing it cannot reset the connection before the node read it.
void RendezvousServer::refuse_over_cap(asio::ip::tcp::socket socket) {
  const std::string why = fmt::format(
      "the rendezvous host has {} connections, its limit max_connections={} (by default 2 per node plus 16, at most "
      "a quarter of the host's ulimit -n, {}); raise the host's ulimit -n (ddprun raises its soft limit to the hard "
      "one) or --rdzv_conf max_connections=N",
      connections_.size(), max_connections_, fd_limit_);
  if (!cap_reported_) {
    cap_reported_ = true;
    say_(fmt::format("ddprun: refused a node: {}\n", why));
  }
  asio::error_code ignored;
  // A flood must not take every descriptor with refusals: beyond a few, closed unexplained (a
  // real node then connects again, and is told on a later try).
  if (refused_.size() >= std::max<std::size_t>(1, max_connections_ / 8)) return socket.close(ignored);
  const std::string peer = describe(socket.remote_endpoint(ignored));
  auto channel = std::make_shared<Channel>(std::move(socket), timeouts_, peer, Channel::NoDelay::kInherited);
  refused_.insert(channel);
  channel->hold_heartbeats_until_authenticated();
  std::weak_ptr<Channel> weak = channel;
  channel->start([](const nlohmann::json&) {},
                 [this, weak, alive = lifetime_.token()](const std::string&) {
                   if (alive.expired()) return;
                   if (auto c = weak.lock()) refused_.erase(c);
                 });
  JobOutcome refusal;
  refusal.exit_code = exit_code::kRendezvous;
  refusal.error = why;
  channel->send(to_wire(Finish{0, refusal}));
  channel->finish_sending();
}

// The process is out of file descriptors: the pending connection would make accept fail at
// once, again and again. Give up the reserve descriptor, accept that connection and close it,
// take the reserve back, and wait a moment before accepting again.
void RendezvousServer::accept_one_at_fd_limit() {
  if (!fd_limit_reported_) {
    fd_limit_reported_ = true;
    say_("ddprun: the rendezvous host is out of file descriptors (ulimit -n); closing new connections until some "
         "are freed\n");
  }
  if (reserve_fd_ >= 0) {
    ::close(reserve_fd_);
    const int fd = ::accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) ::close(fd);
    reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  accept_pause_.expires_after(seconds(kFdLimitPause));
  accept_pause_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (!ec && !alive.expired() && !shut_down_) accept_next();
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
  if (shut_down_ || connection.finished) return;
  if (!connection.authenticated) return authenticate(node, connection, type, message);
  if (!connection.joined) {
    if (type != "join") throw std::invalid_argument("a node must join first");
    join(node, connection, message);
  } else {
    const NodeReport report = read_report(message, connection.nproc);
    check_own(report, connection.nproc, connection.round);
    if (std::holds_alternative<LeaveReport>(report)) {
      connection.channel->close();
      connections_.erase(node);
      unjoined_.erase(node);
    }
    host_.receive(node, report);
  }
}

// A join or hello of another version than this host's is refused, naming it as it was sent.
bool RendezvousServer::refused_other_version(NodeId node, Connection& connection, const nlohmann::json& message) {
  if (is_protocol_version(message.at("version"))) return false;
  refuse(node, connection, version_mismatch(message["version"]));
  return true;
}

// A refused node is told why, and so is this host's console; it never counts as joined, so
// that it holds up nothing (the host's own finish waits only for the nodes of the job).
void RendezvousServer::join(NodeId node, Connection& connection, const nlohmann::json& message) {
  if (refused_other_version(node, connection, message)) return;
  const NodeSpec spec = message.at("node");
  const Joiner joiner = own_source_ && same_source(connection.source, *own_source_) ? Joiner::kHost : Joiner::kPeer;
  joining_.emplace(node, joiner);
  host_.join(node, spec, joiner);
}

void RendezvousServer::settle_join(const Messages& answer) {
  const auto [node, joiner] = *std::exchange(joining_, std::nullopt);
  Connection& connection = connections_.at(node);
  if (host_.coordinator().has_node(node)) {
    connection.joined = true;
    unjoined_.erase(node);
    connection.nproc = host_.coordinator().nproc(node);
    connection.hosts_rendezvous = joiner == Joiner::kHost;
    return;
  }
  for (const Message& m : answer) {
    if (const auto* refusal = std::get_if<Finish>(&m); refusal && refusal->node == node) {
      report_refusal(connection, refusal->outcome.error);
    }
  }
}

void RendezvousServer::authenticate(NodeId node, Connection& connection, const std::string& type,
                                    const nlohmann::json& message) {
  constexpr const char* kSameSecret =
      "give every node the same secret (--rdzv_conf secret_file=PATH or DDPRUN_RDZV_SECRET)";
  constexpr const char* kSameJob =
      "start every node's ddprun in the same SLURM job (one srun), or give every node the same secret "
      "(--rdzv_conf secret_file=PATH or DDPRUN_RDZV_SECRET)";
  const bool peer_uses_munge = message.contains("munge");
  try {
    if (!auth_.required()) {
      // Only a hello reaches here: this node authenticates, the host does not.
      return refuse(node, connection,
                    fmt::format("this node authenticates with {} but the rendezvous host does not; {}",
                                peer_uses_munge ? "MUNGE" : "a secret", kSameSecret));
    }
    if (type == "join") {
      if (refused_other_version(node, connection, message)) return;
      return refuse(node, connection,
                    auth_.munge ? fmt::format("the rendezvous authenticates its nodes with MUNGE ({}) and this node "
                                              "does not; {}",
                                              auth_.munge->scope(), kSameJob)
                                : fmt::format("the rendezvous needs the job's secret and this node has none; {}",
                                              kSameSecret));
    }
    if (!connection.handshake) {
      connection.handshake.emplace(AuthRole::kServer, auth_.secret, random_nonce(), kProtocolVersion);
      std::string credential;
      if (auth_.munge) {
        if (!peer_uses_munge || !message["munge"].is_string()) {
          return refuse(node, connection,
                        fmt::format("the rendezvous authenticates its nodes with MUNGE ({}) and this node uses a "
                                    "secret; {}",
                                    auth_.munge->scope(), kSameJob));
        }
        MungeKeyExchange::Grant grant = auth_.munge->grant(message["munge"], message.value("nonce", nlohmann::json()).is_string() ? message["nonce"].get<std::string>() : "");
        connection.handshake->set_secret(std::move(grant.secret));
        credential = std::move(grant.credential);
      } else if (peer_uses_munge) {
        return refuse(node, connection,
                      fmt::format("this node authenticates with MUNGE and the rendezvous host with a secret; {}",
                                  kSameSecret));
      }
      nlohmann::json challenge = connection.handshake->on_hello(message);
      if (refused_other_version(node, connection, message)) return;
      if (!credential.empty()) challenge["munge"] = std::move(credential);
      return connection.channel->send(challenge);
    }
    connection.handshake->on_proof(message);
    connection.channel->authenticate(MessageAuth(AuthRole::kServer, connection.handshake->session_key()));
    connection.handshake.reset();
    connection.authenticated = true;
  } catch (const AuthError& e) {
    refuse(node, connection,
           fmt::format("authentication failed: {}; {}", e.what(), auth_.munge ? kSameJob : kSameSecret));
  }
}

// Tells an unauthenticated or mismatched peer why, and nothing about the job; the connection
// closes when the peer closes it or at the auth deadline.
void RendezvousServer::refuse(NodeId node, Connection& connection, const std::string& why) {
  report_refusal(connection, why);
  JobOutcome refusal;
  refusal.exit_code = exit_code::kRendezvous;
  refusal.error = why;
  send_finish(node, connection, refusal);
}

// A TCPStore client got the answer to its ping from the channel: a torchrun node then fails on
// its next query, and this host says so once; a ddprun node asking whether this is a torchrun
// rendezvous learns that it is not. The connection is forgotten when it closes.
void RendezvousServer::turn_away_torchrun(NodeId node, bool from_torchrun) {
  const auto it = connections_.find(node);
  if (it == connections_.end()) return;
  it->second.finished = true;
  if (!from_torchrun || torchrun_reported_) return;
  torchrun_reported_ = true;
  say_(fmt::format("ddprun: a torchrun node (a PyTorch TCPStore client) at {} reached this ddprun rendezvous and was "
                   "turned away; start every node of the job with ddprun, or every node with torchrun\n",
                   it->second.channel->peer()));
}

void RendezvousServer::report_refusal(const Connection& connection, const std::string& why) {
  if (refusals_reported_ >= kMaxRefusalsReported) return;
  say_(fmt::format("ddprun: refused a rendezvous connection from {}: {}{}\n", connection.channel->peer(), why,
                   ++refusals_reported_ == kMaxRefusalsReported ? " (further refusals are not reported)" : ""));
}

void RendezvousServer::on_closed(NodeId node, const std::string& why) {
  const auto it = connections_.find(node);
  if (it == connections_.end()) return;
  const bool joined = it->second.joined;
  connections_.erase(it);
  unjoined_.erase(node);
  if (joined && !shut_down_) host_.node_gone(node, "it " + why);
  send_host_finish_when_others_closed();
}

void RendezvousServer::deliver(const Messages& messages) {
  if (joining_) settle_join(messages);
  for (const Message& message : messages) {
    const NodeId node = recipient(message);
    const auto it = connections_.find(node);
    if (it == connections_.end()) continue;
    if (const auto* finish = std::get_if<Finish>(&message)) {
      if (it->second.hosts_rendezvous && host_.coordinator().finished()) {
        host_finish_.emplace(node, finish->outcome);
      } else {
        send_finish(node, it->second, finish->outcome);
      }
    } else if (const auto* assign = std::get_if<Assign>(&message)) {
      it->second.round = assign->assignment;
      it->second.channel->send_line(broadcast_lines_.assign(assign->assignment));
    } else if (const auto* stop = std::get_if<Stop>(&message)) {
      it->second.channel->send_line(broadcast_lines_.stop(*stop));
    } else {
      it->second.channel->send(to_wire(message));
    }
  }
  send_host_finish_when_others_closed();
}

void RendezvousServer::membership_changed(const JobMembership& membership) {
  if (on_membership_) on_membership_(membership);
}

void RendezvousServer::send_finish(NodeId node, Connection& connection, const JobOutcome& outcome) {
  connection.channel->send(to_wire(Finish{node, outcome}));
  connection.channel->finish_sending();
  connection.finished = true;
}

void RendezvousServer::send_host_finish_when_others_closed() {
  if (!host_finish_) return;
  for (const auto& [node, connection] : connections_) {
    if (node != host_finish_->first && connection.joined && connection.finished) return;
  }
  const auto host = connections_.find(host_finish_->first);
  if (host != connections_.end()) send_finish(host->first, host->second, host_finish_->second);
  host_finish_.reset();
}

void RendezvousServer::shutdown(const std::string& why) {
  if (shut_down_) return;
  shut_down_ = true;
  host_.halt();
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
