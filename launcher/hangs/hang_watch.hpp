// Hangs on one node, wired together: the watchdog (detection: heartbeats, torchelastic's timers,
// the quiet warning) and the hang response (culprit, stacks, failures), made from the launch
// configuration and the environment. It says and logs what the watchdog notices on its own (a
// quiet rank, a learned timeout, missing heartbeats) and counts the rounds with a hang; what
// concerns the job (a hung rank's failure, a change the live view shows) goes to the agent
// through Hooks.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "hangs/hang_response.hpp"
#include "hangs/watchdog.hpp"
#include "report/event_records.hpp"
#include "ddprun/unique_fd.hpp"
#include "process/worker_group.hpp"
#include "report/status_view.hpp"

namespace ddprun::launcher {

// Seconds of silence after progress before the quiet warning: kQuietWarning, or for tests
// DDPRUN_QUIET_WARNING_SECONDS.
double quiet_warning_seconds(const std::map<std::string, std::string>& environ);

// torchelastic's file timer pipe: "" unless TORCHELASTIC_ENABLE_FILE_TIMER=1; then
// TORCHELASTIC_TIMER_FILE, or "watchdog_timer" in `files_root`.
std::string timer_file_path(const std::map<std::string, std::string>& environ, const std::string& files_root);

class HangWatch {
 public:
  struct Hooks {
    // For the hang response (its `standing` is set here) and for what the watchdog notices on
    // its own: a console line (`say`), an --event_log line (`record`).
    HangResponse::Handlers response;
    std::function<void()> changed;  // something the live view shows changed
    // A rank beat (only where beats are watched: `beats_used`): its rank view's fields.
    std::function<void(int local_rank, double at, std::optional<long long> step, std::optional<double> deadline,
                       double hang_timeout)>
        beat;
  };

  // `python`: the interpreter whose py-spy is looked for first. `beats_used`: beats are used
  // beyond hangs (the live view, warm start). Throws config::UsageError when the timer file's
  // folder cannot be made.
  HangWatch(asio::io_context& io, const config::LaunchConfig& config, const std::map<std::string, std::string>& environ,
            const WorkerGroup& group, const RunPaths& paths, const std::string& python, bool beats_used,
            UniqueFd heartbeat_watch, Hooks hooks);

  Watchdog& watchdog() { return *watchdog_; }
  HangResponse& response() { return *response_; }
  const std::string& timer_file() const { return timer_file_; }
  int hangs_found() const { return hangs_found_; }  // rounds with a hang (ddprun_hangs_total)

  // `w` as the live view shows it; its beats and step only while the round runs.
  RankView rank_view(const WorkerProcess& w, bool running) const;

 private:
  Watchdog::Handlers watchdog_handlers();
  // Counts the hang `respond` reports, if it is the round's first.
  template <typename Respond>
  void count_hang(Respond&& respond);

  const WorkerGroup& group_;
  Hooks hooks_;
  std::string timer_file_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<HangResponse> response_;
  int hangs_found_ = 0;
};

}  // namespace ddprun::launcher
