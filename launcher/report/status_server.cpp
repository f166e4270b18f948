#include "report/status_server.hpp"

#include <chrono>
#include <thread>

#include <asio/read_until.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "ddprun/clocks.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::launcher {

namespace {

using asio::ip::tcp;

// A request's head larger than this is not one of ours: the connection is closed unanswered.
constexpr std::size_t kMaxHead = 16 * 1024;
// A client that sends no complete head in this time is disconnected (as cpp-httplib did).
constexpr auto kReadTimeout = std::chrono::seconds(5);

}  // namespace

struct StatusServer::Listener {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};
  std::thread thread;

  struct Connection {
    explicit Connection(asio::io_context& io) : socket(io), timer(io), buffer(kMaxHead) {}
    tcp::socket socket;
    asio::steady_timer timer;
    asio::streambuf buffer;
    std::string response;
  };

  void accept(StatusServer& server) {
    acceptor.async_accept([this, &server](std::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of file descriptors, say: try again a little later rather than spin.
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this, &server](std::error_code e) {
          if (!e) accept(server);
        });
        return;
      }
      serve(server, std::move(socket));
      accept(server);
    });
  }

  void serve(StatusServer& server, tcp::socket socket) {
    auto c = std::make_shared<Connection>(io);
    c->socket = std::move(socket);
    c->timer.expires_after(kReadTimeout);
    c->timer.async_wait([c](std::error_code ec) {
      if (!ec) c->socket.close(ec);
    });
    asio::async_read_until(c->socket, c->buffer, "\r\n\r\n", [c, &server](std::error_code ec, std::size_t size) {
      if (ec) {
        c->timer.cancel();
        return;
      }
      const auto data = c->buffer.data();
      c->response = server.respond(std::string(asio::buffers_begin(data), asio::buffers_begin(data) + size));
      asio::async_write(c->socket, asio::buffer(c->response), [c](std::error_code, std::size_t) {
        std::error_code ignored;
        c->socket.shutdown(tcp::socket::shutdown_both, ignored);
        c->socket.close(ignored);
        c->timer.cancel();
      });
    });
  }
};

StatusServer::StatusServer(const std::string& addr, int port) : listener_(std::make_unique<Listener>()) {
  const auto refused = [&] {
    return UserError(fmt::format("--status_port={}: cannot listen on {}:{} (in use, or not an address of this host)",
                                 port, addr, port));
  };
  std::error_code ec;
  tcp::resolver resolver(listener_->io);
  const auto endpoints = resolver.resolve(addr, std::to_string(port), tcp::resolver::passive, ec);
  if (ec) throw refused();
  bool listening = false;
  for (const auto& entry : endpoints) {
    tcp::acceptor& acceptor = listener_->acceptor;
    acceptor.open(entry.endpoint().protocol(), ec);
    // SO_REUSEADDR (a port in TIME_WAIT is free), never SO_REUSEPORT, with which a second ddprun
    // given the same port would share it silently instead of being refused.
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(entry.endpoint(), ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) {
      listening = true;
      break;
    }
    std::error_code ignored;
    acceptor.close(ignored);
  }
  if (!listening) throw refused();
  port_ = listener_->acceptor.local_endpoint().port();
  listener_->accept(*this);
  listener_->thread = std::thread([listener = listener_.get()] { listener->io.run(); });
}

StatusServer::~StatusServer() {
  listener_->io.stop();
  if (listener_->thread.joinable()) listener_->thread.join();
}

std::string StatusServer::respond(const std::string& head) {
  std::lock_guard<std::mutex> lock(mutex_);
  return http_response(head, view_, monotonic_seconds());
}

void StatusServer::publish(JobView view) {
  std::lock_guard<std::mutex> lock(mutex_);
  keep_step_histories(view, view_);
  view_ = std::move(view);
}

}  // namespace ddprun::launcher
