// The dying gasp (--snapshot_signal, issue 57): when a worker fails, the surviving workers get a
// signal and --snapshot_grace to save into DDPRUN_SNAPSHOT_DIR before they are stopped. The
// supervisor's Gasping phase decides when (supervisor.hpp), round_workers.cpp sends the signal
// and times the grace; here is what the gasp wrote and how the user is told: the folder's scan,
// and the console line, a pure function tested as a table (tests/launcher/dying_gasp_test.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// What ended the gasp.
enum class GaspEnd {
  kWorkersEnded,    // every worker signalled ended on its own (a handler that saves and exits)
  kGracePassed,     // --snapshot_grace passed: the workers left are stopped as after any failure
  kShutdownSignal,  // ddprun got SIGTERM (SIGINT, ...): the workers are stopped with it at once
  kJobFinished,     // the rendezvous ended the job
  kFenced,          // the rendezvous may count this node lost: the workers are killed at once
};
// The event log's word: "workers_ended", "grace", "signal", "job_finished", "fenced".
const char* to_string(GaspEnd end);

// The regular files under a folder changed (written or renamed into place) at or after a moment.
struct FolderWrites {
  unsigned long long files = 0;
  unsigned long long bytes = 0;
  std::optional<double> last;  // the latest change among them, seconds since the epoch
};
// Scans `folder` recursively (symbolic links not followed) for regular files whose mtime or
// ctime is at or after `since` (seconds since the epoch, as the kernel stamps files: its coarse
// clock, so `since` must be read from CLOCK_REALTIME_COARSE). An absent folder holds none.
FolderWrites written_since(const std::string& folder, double since);

// One gasp, from its signal to its end.
struct GaspReport {
  int signal = 0;
  std::vector<int> ranks;  // the workers signalled (global ranks)
  FolderWrites written;    // since the signal
  double since = 0;        // when the signal was sent, seconds since the epoch (coarse)
  double seconds = 0;      // from the signal to the gasp's end
  double grace = 0;        // --snapshot_grace
  GaspEnd end = GaspEnd::kGracePassed;
  int still_running = 0;  // of those signalled, alive at the gasp's end (stopped now)
  std::string by_signal;  // kShutdownSignal: its name
};

// The console line, e.g. "ddprun: dying gasp: SIGUSR1 to 3 workers; 2 files (1.2 MiB) written
// in 0.8 s; every worker ended in 1.0 s\n"; "" when no worker was signalled (no survivor).
std::string gasp_line(const GaspReport& report);

}  // namespace ddprun::launcher
