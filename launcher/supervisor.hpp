// The supervisor's decisions, as a pure state machine: given the phase of this node's worker
// group and what just happened, the next phase and what to do. The agent (agent.hpp) performs
// the actions; tests check this table directly.
//
//   WaitingForRound --RoundStarted--> Running --WorkerFailed / StopRequested / Shutdown--> Stopping
//   Running --AllEnded (all succeeded)--> WaitingForRound (exit barrier: the rendezvous decides)
//   Stopping --AllEnded--> WaitingForRound (the rendezvous restarts or finishes the job)
//                      or  Exiting (when a shutdown signal was received)
//   any --JobFinished--> Exiting (after stopping workers that still run)
//   Running or Stopping --Fenced--> Stopping, the workers SIGKILLed at once (elastic's fence:
//   the job may re-form without this node; the rendezvous's finish follows)
#pragma once

#include <vector>

namespace ddprun::launcher {

enum class Phase { kWaitingForRound, kRunning, kStopping, kExiting };

enum class Event {
  kRoundStarted,     // the rendezvous assigned this node a round
  kWorkerSucceeded,  // a worker exited 0
  kWorkerFailed,     // a worker failed: non-zero exit or a signal not sent by ddprun
  kAllEnded,         // no worker of the round is left
  kStopRequested,    // the rendezvous asked to stop the round (a failure or change elsewhere)
  kShutdownSignal,   // SIGINT, SIGTERM, SIGHUP or SIGQUIT reached ddprun
  kGraceExpired,     // workers ignored SIGTERM for the whole grace period
  kJobFinished,      // the rendezvous ended the job
  kFenced,           // the rendezvous may count this node lost at any moment: kill the workers now
};

enum class Action {
  kStartWorkers,
  kReportFirstFailure,   // tell the rendezvous, right after the others were told to stop
  kRecordFailure,        // a further failure while stopping: goes into workers_stopped()
  kTerminateWorkers,     // SIGTERM (or the received signal) to every worker's process group
  kArmGraceTimer,
  kKillWorkers,          // SIGKILL to every worker's process group
  kReportStopped,
  kReportSucceeded,
  kLeaveRendezvous,
  kExit,                 // with the job outcome, or 128+signal after a shutdown signal
};

const char* to_string(Phase phase);
const char* to_string(Event event);
const char* to_string(Action action);

struct Transition {
  Phase next;
  std::vector<Action> actions;
};

// `shutting_down`: a shutdown signal was received before this event (the exit follows the
// stop; a second signal while stopping kills the workers at once).
// `job_finished`: the rendezvous already ended the job (the exit follows the stop).
Transition next_transition(Phase phase, Event event, bool shutting_down, bool job_finished);

}  // namespace ddprun::launcher
