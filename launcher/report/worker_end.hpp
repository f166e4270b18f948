// The verdict on how a worker ended: a success, ddprun's own stop taking effect, the orphan
// guard's fence, or a failure (and whether the signal that killed it came from outside). Pure: the agent passes what it
// knows of the worker; tested as a table.
#pragma once

#include <string>
#include <vector>

namespace ddprun::launcher {

// What ddprun knows of a worker that ended.
struct WorkerEnd {
  int wait_status = 0;       // from waitpid()
  int sent_signal = 0;       // the stop signal ddprun sent it, 0 if none
  bool sent_kill = false;    // ddprun sent it SIGKILL
  bool left_message = false; // it left an error message (its error file)
  // Its standard error ends in an exception of its own (raised_on_its_own()).
  bool raised_on_its_own = false;
  // The rendezvous fence's backstop deadline had passed when its end was handled: the orphan
  // guard fences this node's workers then (process/orphan_guard.hpp).
  bool past_fence_backstop = false;
  int sent_gasp = 0;  // the dying gasp's signal ddprun sent it (--snapshot_signal), 0 if none
};

enum class EndVerdict {
  kSucceeded,        // exit code 0
  kStoppedByDdprun,  // the stop ddprun sent taking effect: not a failure
  // SIGKILLed from outside past the fence's backstop: the orphan guard fenced for a launcher
  // that ran too late (stopped or stalled) to do it itself. Not a failure to report: the node is
  // fenced, and the rendezvous's own fence comes next and ends the job here.
  kFencedByGuard,
  kFailed,
};

struct WorkerEndVerdict {
  EndVerdict verdict = EndVerdict::kSucceeded;
  int exit_code = 0;                 // the code, or 128 + the signal
  int signal = 0;                    // the signal that ended it, 0 when it exited
  bool signalled_by_ddprun = false;  // ddprun had sent it a signal (its failure may be a consequence)
  bool signal_from_outside = false;  // killed by a signal ddprun did not send
};

// After ddprun's own stop signal (or its dying gasp's: a worker with no handler for it dies of
// it), an exit is the stop taking effect, not a failure, unless the
// worker left an error message of its own, exited by itself with an exception of its own (a
// SyntaxError on every rank at once), or was killed by a signal ddprun did not send. A SIGKILL
// from outside once the fence's backstop has passed is the guard's fence, not a failure.
WorkerEndVerdict judge_worker_end(const WorkerEnd& end);

// Whether a worker's standard error (its last lines, oldest first) ends in an exception of its
// own, rather than the KeyboardInterrupt, SystemExit or torchelastic SignalException that
// ddprun's stop signal raises.
bool raised_on_its_own(const std::vector<std::string>& stderr_tail);

}  // namespace ddprun::launcher
