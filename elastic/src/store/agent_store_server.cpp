#include "store/agent_store_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "store/store_room.hpp"

namespace ddprun::elastic {

namespace {

// After accept() failed for lack of descriptors or memory: try again later, not in a loop.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

void say(const std::string& line) {
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace

struct AgentStoreServer::Connection {
  Connection(asio::ip::tcp::socket s, AgentStore::ClientId client)
      : socket(std::move(s)), id(client), accepted(std::chrono::steady_clock::now()) {}
  asio::ip::tcp::socket socket;
  AgentStore::ClientId id;
  std::chrono::steady_clock::time_point accepted;
  std::deque<std::string> outbox;
  bool writing = false;
  bool closed = false;
  bool held = true;  // accepted, not served yet (it belongs to the next round)
};

AgentStoreServer::AgentStoreServer(asio::ip::tcp protocol, int bound_socket, std::size_t max_connections,
                                   double silent_grace)
    : acceptor_(io_),
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
  acceptor_.listen(asio::socket_base::max_listen_connections);
  acceptor_.non_blocking(true);
  accept_next();
  thread_ = std::thread([this] { io_.run(); });
}

AgentStoreServer::~AgentStoreServer() {
  asio::post(io_, [this] {
    asio::error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
    room_timer_.cancel();
    for (auto& [id, connection] : connections_) {
      connection->closed = true;
      connection->socket.close(ignored);
    }
    connections_.clear();
    silent_.clear();
  });
  work_.reset();  // run() returns once the closed sockets' handlers have run
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
    std::vector<std::shared_ptr<Connection>> held;
    std::vector<AgentStore::ClientId> served;
    for (const auto& [id, connection] : connections_) {
      if (connection->held) {
        held.push_back(connection);
      } else {
        served.push_back(id);
      }
    }
    for (AgentStore::ClientId id : served) close(id);
    store_.clear();
    holding_ = !serve_connections;
    for (const auto& connection : held) {
      if (serve_connections) {
        serve(connection);
      } else {
        close(connection->id);
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
    asio::ip::tcp::socket socket(io_);
    asio::error_code error;
    socket.assign(acceptor_.local_endpoint().protocol(), fd, error);
    if (error) {
      ::close(fd);
      continue;
    }
    socket.non_blocking(true, error);
    socket.set_option(asio::ip::tcp::no_delay(true), error);
    const AgentStore::ClientId id = next_client_++;
    auto connection = std::make_shared<Connection>(std::move(socket), id);
    connections_[id] = connection;
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
      if (!oldest.held || ::recv(oldest.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) break;
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

void AgentStoreServer::serve(const std::shared_ptr<Connection>& connection) {
  connection->held = false;
  store_.connect(connection->id);
  read_next(connection);
}

// Waits for readability and reads in the handler into the one buffer of the server, so that an
// idle connection costs no buffer of its own (a job may have thousands of workers).
void AgentStoreServer::read_next(const std::shared_ptr<Connection>& connection) {
  connection->socket.async_wait(asio::ip::tcp::socket::wait_read, [this, connection](const asio::error_code& ec) {
    if (connection->closed) return;
    if (ec) return close(connection->id);
    asio::error_code error;
    const std::size_t n = connection->socket.read_some(asio::buffer(buffer_), error);
    if (error == asio::error::would_block || error == asio::error::try_again) return read_next(connection);
    if (error) return close(connection->id);
    silent_.erase(connection->id);
    std::vector<AgentStore::Send> sends;
    std::string why;
    const bool well_formed = store_.receive(connection->id, {buffer_.data(), n}, sends, why);
    for (AgentStore::Send& s : sends) send(s.client, std::move(s.bytes));
    if (!well_formed) {
      asio::error_code ignored;
      const auto peer = connection->socket.remote_endpoint(ignored);
      asio::ip::address address = peer.address();
      if (address.is_v6() && address.to_v6().is_v4_mapped()) {
        address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
      }
      say(fmt::format("ddprun: the workers' store closed the connection from {}:{}: it sent {}\n",
                      address.to_string(), peer.port(), why));
      return close(connection->id);
    }
    read_next(connection);
  });
}

void AgentStoreServer::send(AgentStore::ClientId client, std::string bytes) {
  const auto it = connections_.find(client);
  if (it == connections_.end()) return;
  it->second->outbox.push_back(std::move(bytes));
  if (!it->second->writing) write_next(it->second);
}

void AgentStoreServer::write_next(const std::shared_ptr<Connection>& connection) {
  connection->writing = true;
  asio::async_write(connection->socket, asio::buffer(connection->outbox.front()),
                    [this, connection](const asio::error_code& ec, std::size_t) {
                      if (connection->closed) return;
                      if (ec) return close(connection->id);
                      connection->outbox.pop_front();
                      if (connection->outbox.empty()) {
                        connection->writing = false;
                      } else {
                        write_next(connection);
                      }
                    });
}

void AgentStoreServer::close(AgentStore::ClientId client) {
  const auto it = connections_.find(client);
  if (it == connections_.end()) return;
  asio::error_code ignored;
  it->second->closed = true;
  it->second->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  it->second->socket.close(ignored);
  const bool served = !it->second->held;
  connections_.erase(it);
  silent_.erase(client);
  if (served) store_.disconnect(client);
  accept_next();  // there may be room now for a connection waiting in the backlog
}

}  // namespace ddprun::elastic
