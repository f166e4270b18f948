#include "tcp/tcp_rendezvous.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "core/node_report.hpp"
#include "core/rendezvous_protocol.hpp"
#include "ddprun/system.hpp"
#include "store/tcpstore_greeting.hpp"
#include "tcp/tcp_backends.hpp"

namespace ddprun::elastic {

namespace {

// Until it is reached, the endpoint is tried again this often (the hosting node may start
// after this one). Not a time limit: join_timeout bounds the whole wait.
// Nodes usually start together, the host a moment after a client: retry soon, then less often.
constexpr double kFirstConnectRetry = 0.01;
constexpr double kMaxConnectRetry = 1.0;

std::string describe(const asio::ip::tcp::endpoint& endpoint) {
  return fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
}

}  // namespace

TcpRendezvous::TcpRendezvous(asio::io_context& io, RendezvousConfig config)
    : NodeRendezvous(io),
      config_(std::move(config)),
      endpoint_(tcp_endpoint(config_)),
      endpoint_text_(fmt::format("{}:{}", endpoint_.host, endpoint_.port)),
      resolver_(io),
      connecting_(io),
      join_timer_(io),
      retry_timer_(io),
      connect_retry_(kFirstConnectRetry) {}

TcpRendezvous::~TcpRendezvous() {
  if (channel_) channel_->close();
}

void TcpRendezvous::join(Handlers handlers) {
  if (!start_joining(std::move(handlers), config_)) return;
  auth_.secret = config_.secret;
  if (!config_.munge_scope.empty()) {
    try {
      auth_.munge = std::make_shared<MungeKeyExchange>(open_munge(config_.munge_socket), config_.munge_scope, ::getuid());
    } catch (const MungeError& e) {
      return fail(fmt::format("could not use MUNGE: {}", e.what()));
    }
  }
  host_if_chosen();
  if (round_.state() == NodeRound::State::kDone) return;
  join_deadline_ = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(seconds(config_.timeouts.join_timeout));
  arm_join_timer();
  connect();
}

void TcpRendezvous::arm_join_timer() {
  join_timer_.expires_at(join_deadline_);
  join_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (ec || alive.expired() || channel_ || round_.state() != NodeRound::State::kJoining) return;
    resolver_.cancel();
    retry_timer_.cancel();
    asio::error_code ignored;
    connecting_.close(ignored);
    fail(
        fmt::format("could not reach the rendezvous at {} within {} s (last error: {}); start the node that hosts "
                    "it or raise --rdzv_conf join_timeout=SECONDS",
                    endpoint_text_, config_.timeouts.join_timeout, last_connect_error_));
  });
}

void TcpRendezvous::host_if_chosen() {
  asio::error_code ec;
  const auto endpoints = resolver_.resolve(endpoint_.host, std::to_string(endpoint_.port), ec);
  std::vector<std::string> endpoint_addrs;
  for (const auto& e : endpoints) endpoint_addrs.push_back(e.endpoint().address().to_string());
  std::vector<std::string> own_addrs = interface_addresses();
  if (!config_.local_addr.empty()) {
    for (const auto& e : resolver_.resolve(config_.local_addr, "0", ec)) {
      if (!bind_address_) bind_address_ = e.endpoint().address();
      own_addrs.push_back(e.endpoint().address().to_string());
    }
  }
  const Hosting hosting = hosts_rendezvous(config_, endpoint_addrs, own_addrs);
  if (hosting == Hosting::kNo) return;

  // On the endpoint's own address when this host can bind it (any 127.0.0.0/8 address on
  // loopback, too); else on --local_addr; all addresses only when neither works (is_host=1
  // behind a forwarded or virtual address).
  std::vector<asio::ip::tcp::endpoint> candidates;
  for (const auto& e : endpoints) candidates.push_back(e.endpoint());
  if (bind_address_) candidates.emplace_back(*bind_address_, static_cast<unsigned short>(endpoint_.port));
  candidates.emplace_back(asio::ip::tcp::v4(), static_cast<unsigned short>(endpoint_.port));
  struct rlimit files {};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const long fd_limit = files.rlim_cur == RLIM_INFINITY ? 1L << 20 : static_cast<long>(files.rlim_cur);
  const int max_connections = connection_limit(config_, fd_limit);
  asio::ip::tcp::endpoint listen;
  for (const auto& candidate : candidates) {
    listen = candidate;
    try {
      server_ = std::make_unique<RendezvousServer>(io_, listen, job_settings(config_), config_.timeouts,
                                                   auth_, max_connections, fd_limit, [this](const std::string& line) { say(line); });
      server_->on_membership([this](const JobMembership& m) { announce(m); });
      return;
    } catch (const std::system_error& e) {
      if (e.code().value() == EADDRNOTAVAIL) continue;  // not this host's address
      if (hosting == Hosting::kIfPortFree && e.code() == asio::error::address_in_use) return;
      return fail(fmt::format(
          "could not host the rendezvous on {}: {}; choose another {}", describe(listen), e.code().message(),
          config_.backend == Backend::kStatic && config_.endpoint.empty() ? "--master_port" : "--rdzv_endpoint port"));
    }
  }
}

void TcpRendezvous::connect() {
  if (round_.state() != NodeRound::State::kJoining || left_) return;
  if (server_) {
    asio::ip::tcp::endpoint own = server_->local_endpoint();
    if (own.address().is_unspecified()) own.address(asio::ip::address_v4::loopback());
    return connect_to(own);
  }
  resolver_.async_resolve(endpoint_.host, std::to_string(endpoint_.port),
                          [this, alive = lifetime_.token()](const asio::error_code& ec,
                                                            asio::ip::tcp::resolver::results_type results) {
                            if (alive.expired() || ec == asio::error::operation_aborted) return;
                            if (ec) return retry_connect(ec.message());
                            auto chosen = results.begin();
                            for (auto e = results.begin(); e != results.end(); ++e) {
                              if (bind_address_ && e->endpoint().address().is_v4() == bind_address_->is_v4()) {
                                chosen = e;
                                break;
                              }
                            }
                            connect_to(chosen->endpoint());
                          });
}

void TcpRendezvous::connect_to(const asio::ip::tcp::endpoint& endpoint) {
  connected_to_ = endpoint;
  asio::error_code ec;
  connecting_.close(ec);
  connecting_.open(endpoint.protocol(), ec);
  if (ec) return retry_connect(ec.message());
  ::fcntl(connecting_.native_handle(), F_SETFD, FD_CLOEXEC);  // not the workers' connection
  // Leave from --local_addr, so that the other side sees the address this node advertises.
  if (bind_address_ && bind_address_->is_v4() == endpoint.address().is_v4()) {
    connecting_.bind({*bind_address_, 0}, ec);
  }
  connect_started_ = std::chrono::steady_clock::now();
  connecting_.async_connect(endpoint, [this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (alive.expired() || ec == asio::error::operation_aborted) return;
    if (ec) return retry_connect(ec.message());
    on_connected(std::move(connecting_));
  });
}

void TcpRendezvous::retry_connect(const std::string& error) {
  if (round_.state() != NodeRound::State::kJoining || left_) return;
  last_connect_error_ = error;
  retry_timer_.expires_after(seconds(connect_retry_));
  connect_retry_ = std::min(connect_retry_ * 2, kMaxConnectRetry);
  retry_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (!ec && !alive.expired()) connect();
  });
}

void TcpRendezvous::on_connected(asio::ip::tcp::socket socket) {
  join_timer_.cancel();
  // The host's own node is never counted lost by a connection's end: nothing to hold there.
  if (!server_ && handlers_.connection_opened) {
    held_fd_ = socket.native_handle();
    handlers_.connection_opened(held_fd_);
  }
  channel_ = std::make_shared<Channel>(std::move(socket), config_.timeouts, endpoint_text_);
  // Before anything is sent: the server then knows this connection as its host's own.
  if (server_) server_->expect_own_connection(channel_->local_endpoint());
  // Fencing (core/fence.hpp): the host started counting this connection's silence when it
  // accepted it, after this node began to connect, and again at each heartbeat it acknowledges.
  // The node that hosts the rendezvous is never counted lost by it: no fence there.
  if (!server_) {
    const auto heard = [this, coordinator = "the rendezvous at " + endpoint_text_](auto sent_at) {
      coordinator_heard(sent_at, config_.timeouts.heartbeat_timeout, coordinator);
    };
    heard(connect_started_);
    channel_->on_acknowledged(heard);
  }
  channel_->start([this](const nlohmann::json& message) { on_message(message); },
                  [this](const std::string& why) {
                    const bool heard = channel_->received_anything();
                    channel_.reset();
                    channel_closed();
                    if (!round_.had_round() && !left_ && round_.state() != NodeRound::State::kDone) {
                      return heard ? reconnect(why) : probe_for_torchrun(why);
                    }
                    fail(fmt::format("lost the rendezvous at {}: it {}", endpoint_text_, why));
                  });
  apply(round_.joined());
  if (!auth_.required()) return send_join();
  client_nonce_ = random_nonce();
  handshake_.emplace(AuthRole::kClient, auth_.secret, client_nonce_, kProtocolVersion);
  nlohmann::json hello = handshake_->hello();
  if (auth_.munge) {
    try {
      hello["munge"] = auth_.munge->client_credential(client_nonce_);
    } catch (const MungeError& e) {
      close_channel();
      return fail(fmt::format("could not authenticate with MUNGE: {}", e.what()));
    }
  }
  send(hello);
}

// Closed before this node's first round: the host made room for newer connections (a flood of
// them), or restarted, or is not up yet. Not an end: try again until join_timeout, as before
// the first connection.
void TcpRendezvous::reconnect(const std::string& why) {
  handshake_.reset();
  apply(round_.rejoining());
  connect_retry_ = kFirstConnectRetry;
  if (!reconnect_reported_) {
    reconnect_reported_ = true;
    say(fmt::format("ddprun: the rendezvous at {} {} before this node joined; connecting again\n", endpoint_text_,
                    why));
  }
  arm_join_timer();
  retry_connect(fmt::format("it {} before this node joined", why));
}

// The endpoint said nothing before it closed the connection or fell silent for
// heartbeat_timeout. A torchrun rendezvous (PyTorch's TCPStore) waits silently for a query it
// understands: ask two pings on a new connection, as a TCPStore client would. A TCPStore
// answers both; ddprun's host answers only the first, then closes (channel.hpp). Anything but
// both answers within heartbeat_timeout: not torchrun, connect again.
void TcpRendezvous::probe_for_torchrun(const std::string& why) {
  struct Probe {
    asio::ip::tcp::socket socket;
    asio::steady_timer deadline;
    std::string question = tcpstore_greeting(kDdprunProbeNonce) + tcpstore_ping(kDdprunProbeNonce + 1);
    std::string expected = tcpstore_pong(kDdprunProbeNonce) + tcpstore_pong(kDdprunProbeNonce + 1);
    std::string answer = std::string(expected.size(), '\0');
  };
  auto probe = std::make_shared<Probe>(Probe{asio::ip::tcp::socket(io_), asio::steady_timer(io_)});
  probe->deadline.expires_after(seconds(config_.timeouts.heartbeat_timeout));
  probe->deadline.async_wait([probe](const asio::error_code& ec) {
    asio::error_code ignored;
    if (!ec) probe->socket.close(ignored);
  });
  const auto answered = [this, probe, why, alive = lifetime_.token()](const asio::error_code& ec, std::size_t) {
    probe->deadline.cancel();
    if (alive.expired() || left_ || round_.state() == NodeRound::State::kDone) return;
    if (ec || probe->answer != probe->expected) return reconnect(why);
    fail(fmt::format("the endpoint is a torchrun rendezvous, not ddprun's: {} answers as PyTorch's TCPStore (a "
                     "torchrun --rdzv_backend=c10d host, or its MASTER_PORT); start every node of the job with "
                     "ddprun, or every node with torchrun",
                     describe(connected_to_)));
  };
  probe->socket.async_connect(connected_to_, [probe, answered](const asio::error_code& ec) {
    if (ec) return answered(ec, 0);
    asio::async_write(probe->socket, asio::buffer(probe->question), [probe, answered](const asio::error_code& ec, std::size_t) {
      if (ec) return answered(ec, 0);
      asio::async_read(probe->socket, asio::buffer(probe->answer), answered);
    });
  });
}

void TcpRendezvous::send_join() {
  const std::string addr =
      config_.local_addr.empty() ? channel_->local_endpoint().address().to_string() : config_.local_addr;
  send({{"type", "join"},
        {"version", kProtocolVersion},
        {"node", node_spec(config_, addr, master_port_->port(), server_ != nullptr)}});
}

// Until the host has proved that it knows the secret, nothing it says is believed: a refusal
// ends this node with a rendezvous error whatever exit code it names.
void TcpRendezvous::on_handshake_message(const nlohmann::json& message) {
  std::string why;
  try {
    if (message.value("type", "") == "finish") {
      why = fmt::format("the rendezvous at {} refused this node: {}", endpoint_text_,
                        message.at("outcome").at("error").get<std::string>());
    } else {
      if (auth_.munge) {
        if (!message.contains("munge") || !message["munge"].is_string()) {
          throw AuthError("its challenge has no MUNGE credential");
        }
        handshake_->set_secret(auth_.munge->accept(message["munge"], client_nonce_));
      }
      send(handshake_->on_challenge(message));
      channel_->authenticate(MessageAuth(AuthRole::kClient, handshake_->session_key()));
      handshake_.reset();
      return send_join();
    }
  } catch (const std::exception& e) {
    why = auth_.munge
              ? fmt::format("the rendezvous at {} did not prove with MUNGE that it belongs to this job ({}): {}; check "
                            "the endpoint and that no other program holds its port",
                            endpoint_text_, auth_.munge->scope(), e.what())
              : fmt::format("the rendezvous at {} did not prove that it knows the job's secret ({}): it is not this "
                            "job's rendezvous host, or it has another secret; check the endpoint and that no other "
                            "program holds its port",
                            endpoint_text_, e.what());
  }
  close_channel();
  fail(why);
}

void TcpRendezvous::on_message(const nlohmann::json& message) {
  if (handshake_) return on_handshake_message(message);
  try {
    handle_message(message, [this](JobOutcome outcome) {
      close_channel();
      end(std::move(outcome));
    });
  } catch (const std::exception& e) {
    close_channel();
    fail(fmt::format("the rendezvous at {} sent a bad message: {}", endpoint_text_, e.what()));
  }
}

void TcpRendezvous::close_channel() {
  if (!channel_) return;
  channel_->close();
  channel_.reset();
  channel_closed();
}

// After this process closed its copy of the connection: the launcher's copy goes too, and the
// connection ends.
void TcpRendezvous::channel_closed() {
  if (held_fd_ < 0) return;
  if (handlers_.connection_closed) handlers_.connection_closed(held_fd_);
  held_fd_ = -1;
}

void TcpRendezvous::send(const nlohmann::json& message) {
  if (channel_) channel_->send(message);
}

void TcpRendezvous::release() {
  join_timer_.cancel();
  retry_timer_.cancel();
}

void TcpRendezvous::when_left(std::function<void()> done) {
  if (channel_) return channel_->when_sent(std::move(done));
  done();
}

void TcpRendezvous::leave_job(int signal, const std::string& quarantined) {
  if (server_) {
    // The job cannot go on without its host (quarantine never picks it for the same reason).
    server_->shutdown(quarantined.empty()
                          ? fmt::format("the rendezvous host {} stopped after {}", host_name(), signal_name(signal))
                          : fmt::format("the rendezvous host {} left the job: {}", host_name(), quarantined));
  } else {
    send(leave_message(signal, quarantined));
  }
}

}  // namespace ddprun::elastic
