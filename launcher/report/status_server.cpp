#include "report/status_server.hpp"

#include <sys/socket.h>

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "ddprun/user_error.hpp"

namespace ddprun::launcher {

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::pair<int, std::string> healthz_response(const JobView& view, double now) {
  if (!view.hung.empty()) return {503, view.hung + "\n"};
  for (const auto& r : view.ranks) {
    if (r.running && r.deadline && now >= *r.deadline) {
      const double since = now - r.last_beat.value_or(*r.deadline - view.hang_timeout);
      return {503, fmt::format("rank {}: no progress for {:.1f} s (hang timeout {:.1f} s)\n", r.rank, since,
                               view.hang_timeout)};
    }
  }
  return {200, "ok\n"};
}

std::string status_json(const JobView& view, double now) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : view.ranks) {
    ranks.push_back({
        {"rank", r.rank},
        {"local_rank", r.local_rank},
        {"pid", r.pid},
        {"running", r.running},
        {"last_beat_age", r.last_beat ? nlohmann::json(now - *r.last_beat) : nlohmann::json()},
    });
  }
  const auto [code, health] = healthz_response(view, now);
  nlohmann::json j = {
      {"phase", view.phase},
      {"attempt", view.attempt},
      {"round", view.round},
      {"restart_count", view.restart_count},
      {"restarts_left", std::max(0, view.max_restarts - view.restart_count)},
      {"world_size", view.world_size},
      {"hang_timeout", view.hang_timeout > 0 ? nlohmann::json(view.hang_timeout) : nlohmann::json()},
      {"healthy", code == 200},
      {"ranks", ranks},
  };
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

StatusServer::StatusServer(const std::string& addr, int port) : server_(std::make_unique<httplib::Server>()) {
  // cpp-httplib's default adds SO_REUSEPORT, with which a second ddprun given the same port
  // would share it silently instead of being refused.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto [code, body] = healthz_response(view_, steady_seconds());
    response.status = code;
    response.set_content(body, "text/plain");
  });
  server_->Get("/status", [this](const httplib::Request&, httplib::Response& response) {
    std::lock_guard<std::mutex> lock(mutex_);
    response.set_content(status_json(view_, steady_seconds()), "application/json");
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
