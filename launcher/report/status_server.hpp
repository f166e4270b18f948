// --status_port: a small HTTP server (cpp-httplib, on its own threads) with the job's live view.
//   GET /healthz  200 "ok" while every worker made progress within the hang timeout (always,
//                 without --hang_timeout), 503 with the reason otherwise: a liveness probe.
//   GET /status   JSON: attempt, round, restarts left, phase, hang timeout, and per rank its pid,
//                 whether it runs, and the age of its last heartbeat.
// The event loop publishes a JobView; the server threads read it under a mutex and never touch
// the agent.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace ddprun::launcher {

struct RankView {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  std::optional<double> last_beat;   // steady-clock seconds (steady_seconds())
  std::optional<double> deadline;    // steady-clock seconds after which it counts as hung
};

struct JobView {
  std::string phase = "waiting";     // waiting (for a round), running, stopping, exiting
  int attempt = -1;
  int round = -1;
  int restart_count = 0;
  int max_restarts = 0;
  int world_size = 0;
  double hang_timeout = 0;           // 0: none in force
  std::string hung;                  // why the job counts as hung, "" when it does not
  std::vector<RankView> ranks;
};

// Seconds on the steady clock: the time base of RankView.
double steady_seconds();

// The responses, from a view at `now` (pure, for tests): status code and body.
std::pair<int, std::string> healthz_response(const JobView& view, double now);
std::string status_json(const JobView& view, double now);

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
