#include "store/agent_store_server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "store/listen_backlog.hpp"
#include "store/store_room.hpp"

namespace ddprun::elastic {

namespace {

// After accept() failed for lack of descriptors or memory: try again later, not in a loop.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
// Replies queued for a connection beyond which its queries are not read until they are sent: a
// client that keeps asking and never reads costs the server this much, and what one read of its
// queries asks for (answered whole).
constexpr std::size_t kOutboxLimit = 4 << 20;

int make_epoll() {
  const int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "epoll_create1");
  return fd;
}

void say(const std::string& line) {
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace

struct AgentStoreServer::Connection {
  Connection(int descriptor, AgentStore::ClientId client)
      : fd(descriptor), id(client), accepted(std::chrono::steady_clock::now()) {}
  ~Connection() {
    // shutdown(): a worker forked before its exec holds a copy of the descriptor, which would
    // keep the connection open after close().
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  int fd;
  AgentStore::ClientId id;
  std::chrono::steady_clock::time_point accepted;
  std::string outbox;       // replies not sent yet
  bool held = true;         // accepted, not served yet (it belongs to the next round)
  std::uint32_t events = 0;  // what poller_ watches it for; 0: not in its set
};

AgentStoreServer::AgentStoreServer(asio::ip::tcp protocol, int bound_socket, std::size_t max_connections,
                                   double silent_grace)
    : acceptor_(io_),
      poller_(io_),
      retry_timer_(io_),
      room_timer_(io_),
      work_(asio::make_work_guard(io_)),
      max_connections_(max_connections),
      silent_grace_(silent_grace) {
  // Workers must not inherit it: a worker's copy would keep the port listening after ddprun.
  ::fcntl(bound_socket, F_SETFD, FD_CLOEXEC);
  asio::error_code error;
  acceptor_.assign(protocol, bound_socket, error);
  if (error) {
    ::close(bound_socket);
    throw std::system_error(error);
  }
  poller_.assign(make_epoll());
  acceptor_.listen(kListenBacklog);
  acceptor_.non_blocking(true);
  accept_next();
  poll_next();
  thread_ = std::thread([this] { io_.run(); });
}

AgentStoreServer::~AgentStoreServer() {
  asio::post(io_, [this] {
    asio::error_code ignored;
    acceptor_.close(ignored);
    poller_.close(ignored);
    retry_timer_.cancel();
    room_timer_.cancel();
    connections_.clear();
    silent_.clear();
  });
  work_.reset();  // run() returns once the cancelled waits' handlers have run
  thread_.join();
}

void AgentStoreServer::hold_new_connections() {
  std::promise<void> done;
  asio::post(io_, [this, &done] {
    holding_ = true;
    done.set_value();
  });
  done.get_future().wait();
}

void AgentStoreServer::reset(bool serve_connections) {
  asio::post(io_, [this, serve_connections] {
    std::vector<AgentStore::ClientId> held;
    std::vector<AgentStore::ClientId> served;
    for (const auto& [id, connection] : connections_) (connection->held ? held : served).push_back(id);
    std::sort(held.begin(), held.end());  // served in the order they came
    for (AgentStore::ClientId id : served) close(id);
    store_.clear();
    holding_ = !serve_connections;
    for (AgentStore::ClientId id : held) {
      if (serve_connections) {
        serve(*connections_.at(id));
      } else {
        close(id);
      }
    }
  });
}

void AgentStoreServer::accept_next() {
  if (waiting_to_accept_ || !acceptor_.is_open()) return;
  waiting_to_accept_ = true;
  acceptor_.async_wait(asio::ip::tcp::acceptor::wait_read, [this](const asio::error_code& ec) {
    waiting_to_accept_ = false;
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    accept_ready();
  });
}

// accept4() rather than async_accept: the socket is close-on-exec from the start, so that no
// worker the launcher forks meanwhile inherits it.
void AgentStoreServer::accept_ready() {
  for (;;) {
    if (!room_for_one()) return;
    const int fd = ::accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      retry_timer_.expires_after(kAcceptRetry);
      retry_timer_.async_wait([this](const asio::error_code& e) {
        if (!e) accept_next();
      });
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const AgentStore::ClientId id = next_client_++;
    Connection& connection = *(connections_[id] = std::make_unique<Connection>(fd, id));
    silent_.insert(id);
    if (!holding_) serve(connection);
  }
  accept_next();
}

bool AgentStoreServer::room_for_one() {
  for (;;) {
    // A held connection is not read until its round: whether it has spoken, ask the kernel.
    while (!silent_.empty()) {
      Connection& oldest = *connections_.at(*silent_.begin());
      char byte;
      if (!oldest.held || ::recv(oldest.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) break;
      silent_.erase(silent_.begin());
    }
    std::optional<double> oldest_silent_age;
    if (!silent_.empty()) {
      oldest_silent_age = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                        connections_.at(*silent_.begin())->accepted)
                              .count();
    }
    const StoreRoom room = store_room(connections_.size(), max_connections_, oldest_silent_age, silent_grace_);
    if (room.action == StoreRoom::Action::kAccept) return true;
    if (!limit_reported_) {
      limit_reported_ = true;
      say(fmt::format("ddprun: the workers' store has {} connections, its limit (ulimit -n but an eighth); a new one now "
                      "waits until one closes or one that has sent nothing for {:g} s is closed (is something other "
                      "than the workers connecting to MASTER_PORT?)\n",
                      max_connections_, silent_grace_));
    }
    if (room.action == StoreRoom::Action::kCloseOldestSilent) {
      close(*silent_.begin());
      continue;
    }
    if (room.wait_seconds) {
      room_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(*room.wait_seconds)));
      room_timer_.async_wait([this](const asio::error_code& e) {
        if (!e) accept_next();
      });
    }
    return false;  // else a connection that closes makes room: close() calls accept_next()
  }
}

void AgentStoreServer::serve(Connection& connection) {
  connection.held = false;
  store_.connect(connection.id);
  watch(connection);
}

void AgentStoreServer::watch(Connection& connection) {
  const std::uint32_t events = (connection.outbox.size() <= kOutboxLimit ? EPOLLIN : 0u) |
                               (connection.outbox.empty() ? 0u : EPOLLOUT);
  if (events == connection.events) return;
  epoll_event event{};
  event.events = events;
  event.data.u64 = connection.id;
  const int op = connection.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (::epoll_ctl(poller_.native_handle(), op, connection.fd, &event) != 0) {
    // Only for lack of kernel memory: the connection cannot be served.
    say(fmt::format("ddprun: the workers' store closed a connection: epoll_ctl: {}\n", std::strerror(errno)));
    close(connection.id);
    return;
  }
  connection.events = events;
}

void AgentStoreServer::poll_next() {
  poller_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted || !poller_.is_open()) return;
    poll_ready();
    poll_next();
  });
}

// Level-triggered: at most one read and one flush per ready connection, then the next wait;
// what one read left unread is reported again.
void AgentStoreServer::poll_ready() {
  std::array<epoll_event, 256> events;
  const int n = ::epoll_wait(poller_.native_handle(), events.data(), static_cast<int>(events.size()), 0);
  for (int i = 0; i < n; ++i) {
    const AgentStore::ClientId id = events[static_cast<std::size_t>(i)].data.u64;
    const std::uint32_t ready = events[static_cast<std::size_t>(i)].events;
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;  // closed by an earlier event of this batch
    if ((ready & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && !it->second->outbox.empty()) {
      flush(id);
      it = connections_.find(id);
      if (it == connections_.end()) continue;
    }
    if ((ready & (EPOLLIN | EPOLLERR | EPOLLHUP)) && (it->second->events & EPOLLIN)) read_from(*it->second);
  }
}

// Reads into the one buffer of the server, so that an idle connection costs no buffer of its
// own (a job may have thousands of workers).
void AgentStoreServer::read_from(Connection& connection) {
  const ssize_t n = ::recv(connection.fd, buffer_.data(), buffer_.size(), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) return close(connection.id);
  silent_.erase(connection.id);
  sends_.clear();
  touched_.clear();
  std::string why;
  const bool well_formed = store_.receive(connection.id, {buffer_.data(), static_cast<std::size_t>(n)}, sends_, why);
  // One write a connection for all its replies to this read.
  for (AgentStore::Send& s : sends_) queue(s.client, std::move(s.bytes));
  if (!well_formed) {
    asio::ip::tcp::endpoint peer;
    socklen_t size = static_cast<socklen_t>(peer.capacity());
    if (::getpeername(connection.fd, peer.data(), &size) == 0) peer.resize(size);
    asio::ip::address address = peer.address();
    if (address.is_v6() && address.to_v6().is_v4_mapped()) {
      address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
    }
    say(fmt::format("ddprun: the workers' store closed the connection from {}:{}: it sent {}\n",
                    address.to_string(), peer.port(), why));
    close(connection.id);
  }
  for (AgentStore::ClientId client : touched_) flush(client);
}

void AgentStoreServer::queue(AgentStore::ClientId client, std::string bytes) {
  const auto it = connections_.find(client);
  if (it == connections_.end()) return;
  std::string& outbox = it->second->outbox;
  if (outbox.empty()) {
    touched_.push_back(client);
    outbox = std::move(bytes);
  } else {
    outbox += bytes;
  }
}

void AgentStoreServer::flush(AgentStore::ClientId client) {
  const auto it = connections_.find(client);
  if (it == connections_.end()) return;
  Connection& connection = *it->second;
  std::size_t sent = 0;
  while (sent < connection.outbox.size()) {
    const ssize_t n = ::send(connection.fd, connection.outbox.data() + sent, connection.outbox.size() - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) return close(client);
    sent += static_cast<std::size_t>(n);
  }
  connection.outbox.erase(0, sent);
  watch(connection);  // for room to write while replies are queued; not for queries beyond kOutboxLimit
}

void AgentStoreServer::close(AgentStore::ClientId client) {
  const auto it = connections_.find(client);
  if (it == connections_.end()) return;
  Connection& connection = *it->second;
  // Out of poller_'s set explicitly: a copy of the descriptor in a worker not yet exec'd would
  // keep it there after close().
  if (connection.events != 0) ::epoll_ctl(poller_.native_handle(), EPOLL_CTL_DEL, connection.fd, nullptr);
  const bool served = !connection.held;
  connections_.erase(it);
  silent_.erase(client);
  if (served) store_.disconnect(client);
  accept_next();  // there may be room now for a connection waiting in the backlog
}

}  // namespace ddprun::elastic
