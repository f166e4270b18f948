// The supervisor's decisions, as a pure state machine: given the phase of this node's worker
// group and what just happened, the next phase and what to do. The agent (agent.hpp) performs
// the actions; tests check this table directly (tests/launcher/supervisor_test.cpp). What the
// node is to do once its workers have stopped is a phase of its own, not a flag beside one (as
// s6-supervise keeps "last up" and "last finish" as states):
//
//   (start) CheckingToJoin --HealthCheckPassed--> WaitingForRound (joins the rendezvous)
//   WaitingForRound --RoundStarted--> Starting --WorkersStarted--> Running
//   Starting: the round's workers start; with --warm_start, maybe after the warm interpreter's
//     imports (a stop meanwhile cancels the start: CancelStart)
//   Running --AllEnded (all succeeded)--> WaitingForRound (exit barrier: the rendezvous decides)
//   Starting or Running --WorkerFailed / StopRequested / PeerFailed--> Stopping --AllEnded-->
//     CheckingToRejoin --HealthCheckPassed--> WaitingForRound (reports the stop: the rendezvous
//     restarts or finishes the job)
//   With --snapshot_signal (Supervision::gasp), a failure's dying gasp comes first:
//     Running --WorkerFailed / PeerFailed--> Gasping (the survivors get the signal and the grace to
//     save) --GaspEnded--> Stopping, or --AllEnded (every survivor ended on its own)-->
//     CheckingToRejoin; a shutdown signal, the job's end or a fence ends the gasp at once
//   CheckingToJoin or CheckingToRejoin --HealthCheckFailed--> Exiting (exit 71: the node leaves
//     the job as quarantined); --ShutdownSignal--> Exiting (the check killed). --health_check
//     (health_check.hpp): without one, the check passes at once
//   Starting or Running --JobFinished--> StoppingToExit --AllEnded--> Exiting
//   Starting or Running --ShutdownSignal--> StoppingToLeave --AllEnded--> Exiting (leaving the
//     rendezvous); a second signal while stopping kills the workers at once
//   Starting, Running or any Stopping --Fenced--> the workers SIGKILLed at once (elastic's fence:
//     the job may re-form without this node; the rendezvous's finish follows)
//   WaitingForRound --JobFinished / ShutdownSignal--> Exiting
#pragma once

#include <vector>

namespace ddprun::launcher {

enum class Phase {
  kCheckingToJoin,    // the health check runs before the node first joins the rendezvous
  kCheckingToRejoin,  // the workers stopped; the health check runs before the stop is reported
  kWaitingForRound,
  kStarting,         // the round's workers are being started (or wait for the warm interpreter)
  kRunning,
  // A failure's dying gasp (--snapshot_signal): the survivors were sent the signal and are given
  // --snapshot_grace to save and end on their own; then the others are stopped (Stopping).
  kGasping,
  kStopping,         // then the rendezvous is told, and decides
  kStoppingToExit,   // the job finished: then ddprun exits with its outcome
  kStoppingToLeave,  // a shutdown signal came: then ddprun leaves the rendezvous and exits
  kExiting,
};

// Whether the round's workers start or run in `phase` (/status shows it as running).
bool is_up(Phase phase);
// Whether `phase` stops the workers, whatever follows (a failure now comes after another);
// Gasping too.
bool is_stopping(Phase phase);

enum class Event {
  kRoundStarted,     // the rendezvous assigned this node a round
  kWorkersStarted,   // the round's start is over: every worker forked, or the start ended early
  kWorkerSucceeded,  // a worker exited 0
  kWorkerFailed,     // a worker failed: non-zero exit or a signal not sent by ddprun
  kAllEnded,         // no worker of the round is left, and none is to start or to be reported
  kStopRequested,    // the rendezvous asked to stop the round (a change elsewhere, a shutdown)
  kPeerFailed,       // the rendezvous asked to stop the round for a failure elsewhere: a worker
                     // failed or a node was lost (its survivors here hold the step it failed in)
  kShutdownSignal,   // SIGINT, SIGTERM, SIGHUP or SIGQUIT reached ddprun
  kGraceExpired,     // workers ignored SIGTERM for the whole grace period
  kGaspEnded,        // the dying gasp is over: its grace (--snapshot_grace) passed, or another
                     // source (occurrence.hpp) ended it
  kJobFinished,      // the rendezvous ended the job
  kFenced,           // the rendezvous may count this node lost at any moment: kill the workers now
  kHealthCheckPassed,  // the health check says join: it passed, or ended otherwise with a warning
  kHealthCheckFailed,  // the health check exited 1: the node is unfit
};

enum class Action {
  kRunHealthCheck,       // the last round's processes gone, the health check starts (none: it passes)
  kStopHealthCheck,      // SIGKILL to the health check's process group
  kJoinRendezvous,
  kStartWorkers,
  kCancelStart,          // no further worker starts (the wait for the warm interpreter ends)
  kReportFirstFailure,   // tell the rendezvous, right after the others were told to stop
  kRecordFailure,        // a further failure while stopping: goes into workers_stopped()
  kNoteFailure,          // a failure nothing reports: its kind is found, logged and counted
  kTerminateWorkers,     // SIGTERM (or the received signal) to every worker's process group
  kArmGraceTimer,
  kKillWorkers,          // SIGKILL to every worker's process group
  kGasp,                 // --snapshot_signal to each live worker's own process; GaspEnded armed
                         // after --snapshot_grace
  kEndGasp,              // the gasp's timer cancelled; what the workers wrote since the signal
                         // in DDPRUN_SNAPSHOT_DIR is said and logged
  kReportStopped,
  kReportSucceeded,
  kLeaveRendezvous,
  kLeaveQuarantined,     // the rendezvous is told this node leaves as quarantined (its health check)
  kExit,                 // with the job outcome, or 128+signal after a shutdown signal
};

const char* to_string(Phase phase);
// The word /status and `ddprun status` give `phase` (public: docs/reference/status.md): waiting,
// running (Starting too), stopping (all three), exiting.
const char* status_name(Phase phase);
const char* to_string(Event event);
const char* to_string(Action action);

struct Transition {
  Phase next;
  std::vector<Action> actions;
};

// What the node's configuration changes in the table.
struct Supervision {
  // --snapshot_signal is set: a failure (here or on another node) while the workers run is
  // followed by a dying gasp (Gasping) before the stop. Starting has no gasp: no step was taken.
  bool gasp = false;
};

// Where ddprun starts: the health check before the first join.
Transition first_transition();
Transition next_transition(Phase phase, Event event, Supervision supervision = {});

}  // namespace ddprun::launcher
