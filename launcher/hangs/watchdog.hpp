// The watchdog of one node's workers: their heartbeat files (heartbeat_files.hpp) feed the hang
// policy (hang_policy.hpp), and one timer, armed for the next moment the policy could find a
// hang, asks it. It also serves torchelastic's file timers (file_timer_server.hpp). It decides
// nothing about stopping: it tells the agent, once per round, which ranks are hung.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/steady_timer.hpp>

#include "ddprun/launch_config.hpp"
#include "ddprun/progress_record.hpp"
#include "hangs/file_timer_server.hpp"
#include "hangs/hang_policy.hpp"
#include "hangs/heartbeat_files.hpp"
#include "hangs/progress_records.hpp"

namespace ddprun::launcher {

class Watchdog {
 public:
  struct Handlers {
    // Once per round: the hung ranks, and every rank's progress record (by local rank), read
    // once for all that the hang's response decides.
    std::function<void(const std::vector<HungRank>&, const std::vector<ProgressRecord>&)> hung;
    std::function<void(int, double)> beat;                  // local rank, monotonic_seconds()
    std::function<void(double)> learned;                    // auto: a new, larger timeout
    std::function<void(double)> missing;                    // auto: no rank beat within this many seconds
    std::function<void(const ExpiredTimer&)> timer_expired;
    std::function<void(const std::vector<QuietRank>&)> quiet;  // off: silent quiet_after s after progress
  };

  // `timer_file`: the pipe for torchelastic's FileTimerClient, "" for none. `quiet_after`: see
  // HangPolicy. The heartbeat files are watched only where something uses the beats: a hang
  // timeout in `setting`, the quiet warning, or `beats_used` (the status server's view, warm start), with
  // the inotify instance `heartbeat_watch` (see HeartbeatFiles).
  Watchdog(asio::io_context& io, config::HangTimeout setting, double quiet_after, const std::string& timer_file,
           Handlers handlers, bool beats_used, UniqueFd heartbeat_watch);

  // A round's workers, by local rank, and their heartbeat files (created here).
  void start_round(const std::vector<std::string>& heartbeat_files);
  // Stops watching and judging until the next round.
  void end_round();

  // A stream of `local_rank` stopped (true) or went on (false) being held back by ddprun
  // (output_stream.hpp): its silence meanwhile does not count (hang_policy.hpp).
  void output_paused(int local_rank, bool paused);

  // `local_rank`'s worker ended: not judged again this round (HangPolicy::ended).
  void worker_ended(int local_rank);

  // A line of `local_rank`'s output matched a --progress_pattern: progress, like a beat, at
  // `step` if the pattern gave one.
  void progress(int local_rank, std::optional<long long> step);

  // Where `local_rank` stands now (HangPolicy::standing): for a rank that others wait for
  // (culprit.hpp). At a hang its last step is its record's, read then.
  HungRank standing(int local_rank) const;

  const HangPolicy& policy() const { return policy_; }
  // When `local_rank` will count as hung (monotonic_seconds()), if it can now (not while its
  // output is held back).
  std::optional<double> deadline(int local_rank) const;

 private:
  void beat(int local_rank, std::optional<long long> step = std::nullopt);
  void file_beat(int local_rank);
  // The step of `record`; nullopt when it has none, or when a --progress_pattern gave steps (the
  // user's own numbering wins).
  std::optional<long long> step_of(const ProgressRecord& record) const;
  // Every rank's record, read now; their steps become the ranks' last steps in the policy (a
  // record keeps every step, beats come at most every 100 ms).
  std::vector<ProgressRecord> read_records();
  void arm();
  void check();

  asio::steady_timer timer_;
  std::optional<double> armed_for_;
  HangPolicy policy_;
  Handlers handlers_;
  std::unique_ptr<HeartbeatFiles> files_;  // none when no beat is used
  std::unique_ptr<FileTimerServer> file_timers_;
  ProgressRecords records_;                    // this round's, by local rank
  bool pattern_steps_ = false;                 // a --progress_pattern gave a step
  bool judging_ = false;
};

}  // namespace ddprun::launcher
