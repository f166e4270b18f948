// One round's workers on this node: each started with its own files (error file, heartbeat,
// stacks) and output streams, signalled as a group, reaped, and cleared at the end of the round.
// The agent (agent.hpp) decides when; this does it.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "output/output_stream.hpp"
#include "process/containment.hpp"
#include "process/orphan_guard.hpp"
#include "process/spawn.hpp"
#include "process/start_request.hpp"
#include "process/warm_start.hpp"

namespace asio {
class io_context;
}

namespace ddprun::launcher {

// Paths of one run: where log and error files go.
struct RunPaths {
  std::string logs_root;      // attempt_N/rank_R/{stdout,stderr}.log; empty: no log files
  bool log_everything = false;  // --log_dir given: every stream, not just redirected/teed ones
  std::string private_root;   // the workers' own files when there is no logs_root; removed at exit
  std::string snapshot_dir;   // DDPRUN_SNAPSHOT_DIR (snapshots/snapshot_dir.hpp); "" with --snapshot=off
  // Where each worker's own files go: the log folder, else the private one.
  const std::string& files_root() const { return logs_root.empty() ? private_root : logs_root; }
};

// The last lines of a worker's standard error that ddprun keeps, to tell what kind of failure
// its end was (report/failure_classifier.hpp).
inline constexpr std::size_t kFailureTailLines = 40;

struct WorkerProcess {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  double forked = 0;     // seconds since the epoch, taken right after it was forked
  bool warm = false;     // forked from the warm interpreter (--warm_start), not started cold
  bool alive = false;    // until its end has been handled
  bool reaped = false;   // its pid is gone: never signal it again
  int sent_signal = 0;   // the stop signal ddprun sent, 0 if none
  int sent_gasp = 0;     // the dying gasp's signal ddprun sent (--snapshot_signal), 0 if none
  bool sent_kill = false;
  std::string error_file;
  std::string heartbeat_file;
  std::string stacks_file;  // written when the round hangs
  // Where a Python worker's faulthandler writes its stacks when ddprun asks (hangs/python_stacks.hpp),
  // in the private folder; "" when ddprun's bootstrap is not given to the worker.
  std::string python_stacks_file;
  std::shared_ptr<OutputStream> out;
  std::shared_ptr<OutputStream> err;
};

class WorkerGroup {
 public:
  WorkerGroup(asio::io_context& io, const config::LaunchConfig& config, std::map<std::string, std::string> environ,
              std::vector<std::string> argv, OrphanGuard& guard, Containment& containment, const RunPaths& paths);

  // Starts this node's workers of `round` as its attempt `attempt` (folder attempt_N), with
  // TORCHELASTIC_TIMER_FILE `timer_file` when not empty. `files_ready` gets every worker's
  // heartbeat file (none without a files folder) after the folders are made and before the
  // first worker starts, so that not even a worker's first beat can come before the watch. Stops
  // at the first worker that cannot start, or before the first fork at or after `start_by` (the
  // fence's deadline); the ones already started run on.
  struct Started {
    WorkerProcess* failed = nullptr;  // the worker whose exec failed, with its errno
    int error = 0;
    bool past_deadline = false;  // `start_by` passed: the workers from there on were not forked
  };
  Started start(const elastic::RoundAssignment& round, int attempt, const std::string& timer_file,
                const std::function<void(const std::vector<std::string>& heartbeat_files)>& files_ready,
                std::optional<std::chrono::steady_clock::time_point> start_by);

  // The group's signal to every live worker's process group (the worker's own children too).
  void signal(int sig);
  // To each live worker's own process only: its children keep SIGUSR1/2's default, which is to die.
  void forward(int sig);
  // The dying gasp (--snapshot_signal): `sig` to each live worker's own process, as forward()
  // does, marked as ddprun's (a worker it kills was stopped by ddprun). Returns their ranks.
  std::vector<int> gasp(int sig);
  // Collects every child that ended: workers as (worker, wait status), marked reaped; any other
  // pid (a stack tool, the health check, an orphaned grandchild) goes to `other` with its wait status.
  std::vector<std::pair<WorkerProcess*, int>> reap(const std::function<void(pid_t, int)>& other);
  // The round is over: what is left in the pipes is forwarded, and every process the workers
  // left behind is killed: their process groups, and what escaped them (containment.hpp).
  void end_round();

  // Called when a stream of the worker at `local_rank` stops (true) or goes on (false) reading
  // its pipe because the console or a log file is full (output_stream.hpp).
  std::function<void(int local_rank, bool paused)> output_paused;
  // Called when a line of the worker at `local_rank` matched a --progress_pattern (at most once
  // per read of its pipe), with the step of the last such line that gave one.
  std::function<void(int local_rank, std::optional<long long> step)> output_progress;

  // --warm_start: the warm interpreter the workers are forked from (warm_start.hpp).
  WarmStart& warm_start() { return *warm_; }

  int alive_count() const;
  WorkerProcess* by_local_rank(int local_rank) const;
  const std::vector<std::unique_ptr<WorkerProcess>>& workers() const { return workers_; }

 private:
  // The attempt's filtered log of one stream, attempt_N/filtered_std{out,err}.log (torchrun's
  // names), when --duplicate_std*_filters has filters for it and there is a log folder; else null.
  struct Filtered {
    std::shared_ptr<const std::vector<std::string>> filters;
    std::shared_ptr<UniqueFd> file;
  };
  Filtered open_filtered(int attempt, int stream_bit) const;
  // One worker of a start, planned: its files named (its folder made, an earlier attempt's files
  // removed) and its environment.
  struct Planned {
    std::unique_ptr<WorkerProcess> worker;
    std::vector<std::string> environ;
  };
  // This node's workers of `round`, in local rank order; nothing started.
  std::vector<Planned> plan(const elastic::RoundAssignment& round, int attempt, const std::string& timer_file) const;
  // Starts one planned worker, its output streams and the guard's watch: Started{} when it runs,
  // else why the start stops there (start()'s contract). It joins workers_ once it runs or could
  // not start, not when the deadline stopped it first.
  Started start_worker(Planned& planned, int attempt, const Filtered& filtered_out, const Filtered& filtered_err,
                       std::optional<std::chrono::steady_clock::time_point> start_by);
  // The one place that chooses warm or cold: forked from the warm interpreter (WarmStart::fork)
  // where it can, else spawned (spawn_process()).
  struct StartedProcess {
    SpawnResult spawned;
    bool forked = false;  // by the warm interpreter
  };
  StartedProcess start_process(const StartRequest& request);
  // --numa_binding: numa_cpus_, or one line saying why binding is skipped.
  void plan_numa_binding();
  std::shared_ptr<OutputStream> open_stream(int read_fd, const WorkerProcess& w, int stream_bit,
                                            const std::string& log_name, Filtered filtered);

  asio::io_context& io_;
  const config::LaunchConfig& config_;
  std::shared_ptr<const std::vector<config::ProgressPattern>> progress_patterns_;  // compiled once
  std::map<std::string, std::string> environ_;
  std::vector<std::string> argv_;
  std::string python_bootstrap_;  // first on Python workers' PYTHONPATH (--progress); "" for none
  std::shared_ptr<const std::vector<std::string>> stdout_filters_, stderr_filters_;
  std::vector<cpu_set_t> numa_cpus_;  // --numa_binding: by local rank; empty: no binding
  std::unique_ptr<WarmStart> warm_;
  OrphanGuard& guard_;
  Containment& containment_;
  const RunPaths& paths_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
};

}  // namespace ddprun::launcher
