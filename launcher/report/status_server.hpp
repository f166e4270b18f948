// --status_port: a small HTTP server (cpp-httplib, on its own threads) with the job's live view.
//   GET /healthz  200 "ok" while every worker made progress within the hang timeout (always,
//                 without --hang_timeout), 503 with the reason otherwise: a liveness probe.
//   GET /status   JSON: attempt, round, restarts left, phase, hang timeout, and per rank its pid,
//                 whether it runs, and the age of its last heartbeat.
// The event loop publishes a JobView (status_view.hpp, which also makes the responses); the
// server threads read it under a mutex and never touch the agent.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "report/status_view.hpp"

namespace httplib {
class Server;
}

namespace ddprun::launcher {

class StatusServer {
 public:
  // Listens on addr:port (0: a free port). Throws ddprun::UserError, naming --status_port, when
  // it cannot.
  StatusServer(const std::string& addr, int port);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const { return port_; }
  void publish(JobView view);
  // Applies `change` to the published view (for small updates such as one beat).
  template <typename Change>
  void update(Change&& change) {
    std::lock_guard<std::mutex> lock(mutex_);
    change(view_);
  }

 private:
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  JobView view_;
};

}  // namespace ddprun::launcher
