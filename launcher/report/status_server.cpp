#include "report/status_server.hpp"

#include <sys/socket.h>

#include <fmt/format.h>
#include <httplib.h>

#include "ddprun/clocks.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::launcher {

StatusServer::StatusServer(const std::string& addr, int port) : server_(std::make_unique<httplib::Server>()) {
  // cpp-httplib's default adds SO_REUSEPORT, with which a second ddprun given the same port
  // would share it silently instead of being refused.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto [code, body] = healthz_response(view_, monotonic_seconds());
    response.status = code;
    response.set_content(body, "text/plain");
  });
  server_->Get("/status", [this](const httplib::Request&, httplib::Response& response) {
    std::lock_guard<std::mutex> lock(mutex_);
    response.set_content(status_json(view_, monotonic_seconds()), "application/json");
  });
  port_ = port == 0 ? server_->bind_to_any_port(addr) : (server_->bind_to_port(addr, port) ? port : -1);
  if (port_ <= 0) {
    throw UserError(fmt::format("--status_port={}: cannot listen on {}:{} (in use, or not an address of this host)",
                                port, addr, port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

StatusServer::~StatusServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void StatusServer::publish(JobView view) {
  std::lock_guard<std::mutex> lock(mutex_);
  view_ = std::move(view);
}

}  // namespace ddprun::launcher
