// --status_port: a small HTTP/1.1 server on Asio, on its own thread, with the job's live view.
//   GET /healthz  200 "ok" while every worker made progress within the hang timeout (always,
//                 without --hang_timeout), 503 with the reason otherwise: a liveness probe.
//   GET /status   JSON: attempt, round, restarts left, phase, hang timeout, this node, the job's
//                 progress (total steps, slowest rank, stragglers), and per rank its pid, state,
//                 the age of its last heartbeat, its step, steps per second, time since its last step.
//   GET /metrics  the same in Prometheus' text format (metrics.hpp).
// One request per connection (each response closes it). The event loop publishes a JobView
// (status_view.hpp, which also makes the responses); the server's thread reads it under a mutex
// and never touches the agent.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "report/status_view.hpp"

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
  // Replaces the view, keeping the step histories of the workers still in it.
  void publish(JobView view);
  // Applies `change` to the published view (for small updates such as one beat).
  template <typename Change>
  void update(Change&& change) {
    std::lock_guard<std::mutex> lock(mutex_);
    change(view_);
  }

 private:
  struct Listener;
  std::string respond(const std::string& head);

  std::mutex mutex_;
  JobView view_;
  int port_ = 0;
  std::unique_ptr<Listener> listener_;  // last: its thread stops before the view goes
};

}  // namespace ddprun::launcher
