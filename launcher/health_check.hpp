// --health_check (issue 56): the node's own check before it joins a round, the first and every
// one after a stop (the supervisor's CheckingToJoin and CheckingToRejoin phases), as NVIDIA's
// node health checks and Slurm's HealthCheckProgram. CMD runs under /bin/sh -c as a child of
// ddprun watched on the agent's loop, which it never blocks: its end through the agent's reaping
// (SIGCHLD), its output through a pipe read as it comes, its deadline (--health_check_timeout)
// through a timer. It leads a process group of its own, which gets SIGKILL at the deadline, when
// the check ends (whatever it left running) and when ddprun stops it; if ddprun dies, the orphan
// guard (or ddprun's cgroup) kills it. The verdict on its end is report/health_check_end.hpp's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "output/line_splitter.hpp"
#include "process/containment.hpp"
#include "process/orphan_guard.hpp"
#include "report/health_check_end.hpp"

namespace ddprun::launcher {

// What a check is told, beside ddprun's own environment (docs/reference/environment.md):
// DDPRUN_HEALTH_CHECK_ATTEMPT, this node's start of its workers that follows the check (0 before
// the first join, as --log_dir's attempt_N); TORCHELASTIC_RESTART_COUNT, the job's restarts as of
// the node's last round (0 before the first); TORCHELASTIC_MAX_RESTARTS; LOCAL_WORLD_SIZE;
// TORCHELASTIC_RUN_ID, the job's id where known; DDPRUN_HEALTH_CHECK_TIMEOUT, its deadline in
// seconds.
std::map<std::string, std::string> health_check_variables(const config::LaunchConfig& config, int attempt,
                                                          const elastic::RoundAssignment& last_round,
                                                          const std::string& run_id);

// The outcome of a job this node leaves because its check exited 1: exit 71, and why.
elastic::JobOutcome health_check_quarantine(const HealthCheckReport& report, const std::string& host,
                                            const elastic::RoundAssignment& last_round);

class HealthCheck {
 public:
  struct Context {
    asio::io_context& io;
    const config::LaunchConfig& config;
    const std::map<std::string, std::string>& environ;
    OrphanGuard& guard;
    const Containment& containment;
    // The check ended (not after stop()): called on the loop, once a start.
    std::function<void(HealthCheckReport)> ended;
  };
  explicit HealthCheck(Context context);
  ~HealthCheck();

  // Whether --health_check names a check.
  bool configured() const { return !c_.config.health_check.empty(); }
  // Starts the check, `variables` added to ddprun's environment. Only when configured() and none
  // runs. A check that cannot start ends at once (ended()).
  void start(const std::map<std::string, std::string>& variables);
  // A child reaped by the agent: true when it was the check, whose end is then handled.
  bool reaped(pid_t pid, int wait_status);
  // Kills the running check's group, if any; ended() is not called.
  void stop();

 private:
  void watch_output();
  void read_output();
  void end(HealthCheckEnd how);
  void clean_up();

  Context c_;
  pid_t pid_ = -1;        // the check (and its process group) while it runs
  bool guarded_ = false;  // its group is registered with the orphan guard
  bool timed_out_ = false;
  std::chrono::steady_clock::time_point started_;
  asio::steady_timer deadline_;
  std::unique_ptr<asio::posix::stream_descriptor> output_;
  LineSplitter splitter_;
  std::deque<std::string> lines_;
};

}  // namespace ddprun::launcher
