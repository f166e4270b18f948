#include "supervisor.hpp"

namespace ddprun::launcher {

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kCheckingToJoin: return "CheckingToJoin";
    case Phase::kCheckingToRejoin: return "CheckingToRejoin";
    case Phase::kWaitingForRound: return "WaitingForRound";
    case Phase::kStarting: return "Starting";
    case Phase::kRunning: return "Running";
    case Phase::kGasping: return "Gasping";
    case Phase::kStopping: return "Stopping";
    case Phase::kStoppingToExit: return "StoppingToExit";
    case Phase::kStoppingToLeave: return "StoppingToLeave";
    case Phase::kExiting: return "Exiting";
  }
  return "?";
}

const char* status_name(Phase phase) {
  switch (phase) {
    case Phase::kCheckingToJoin:
    case Phase::kCheckingToRejoin:
    case Phase::kWaitingForRound: return "waiting";
    case Phase::kStarting:
    case Phase::kRunning: return "running";
    case Phase::kGasping:
    case Phase::kStopping:
    case Phase::kStoppingToExit:
    case Phase::kStoppingToLeave: return "stopping";
    case Phase::kExiting: return "exiting";
  }
  return "?";
}

const char* to_string(Event event) {
  switch (event) {
    case Event::kRoundStarted: return "RoundStarted";
    case Event::kWorkersStarted: return "WorkersStarted";
    case Event::kWorkerSucceeded: return "WorkerSucceeded";
    case Event::kWorkerFailed: return "WorkerFailed";
    case Event::kAllEnded: return "AllEnded";
    case Event::kStopRequested: return "StopRequested";
    case Event::kPeerFailed: return "PeerFailed";
    case Event::kShutdownSignal: return "ShutdownSignal";
    case Event::kGraceExpired: return "GraceExpired";
    case Event::kGaspEnded: return "GaspEnded";
    case Event::kJobFinished: return "JobFinished";
    case Event::kFenced: return "Fenced";
    case Event::kHealthCheckPassed: return "HealthCheckPassed";
    case Event::kHealthCheckFailed: return "HealthCheckFailed";
  }
  return "?";
}

const char* to_string(Action action) {
  switch (action) {
    case Action::kRunHealthCheck: return "RunHealthCheck";
    case Action::kStopHealthCheck: return "StopHealthCheck";
    case Action::kJoinRendezvous: return "JoinRendezvous";
    case Action::kStartWorkers: return "StartWorkers";
    case Action::kCancelStart: return "CancelStart";
    case Action::kReportFirstFailure: return "ReportFirstFailure";
    case Action::kRecordFailure: return "RecordFailure";
    case Action::kNoteFailure: return "NoteFailure";
    case Action::kTerminateWorkers: return "TerminateWorkers";
    case Action::kArmGraceTimer: return "ArmGraceTimer";
    case Action::kKillWorkers: return "KillWorkers";
    case Action::kGasp: return "Gasp";
    case Action::kEndGasp: return "EndGasp";
    case Action::kReportStopped: return "ReportStopped";
    case Action::kReportSucceeded: return "ReportSucceeded";
    case Action::kLeaveRendezvous: return "LeaveRendezvous";
    case Action::kLeaveQuarantined: return "LeaveQuarantined";
    case Action::kExit: return "Exit";
  }
  return "?";
}

bool is_up(Phase phase) { return phase == Phase::kStarting || phase == Phase::kRunning; }

bool is_stopping(Phase phase) {
  return phase == Phase::kGasping || phase == Phase::kStopping || phase == Phase::kStoppingToExit ||
         phase == Phase::kStoppingToLeave;
}

namespace {

using A = Action;
using E = Event;
using P = Phase;

// Starting and Running: the workers start or run.
Transition while_up(P phase, E event, Supervision s) {
  // A start still under way is cancelled first: nothing may start once the workers are stopped.
  const auto stop = [phase](P next, std::vector<A> actions) {
    if (phase == P::kStarting) actions.insert(actions.begin(), A::kCancelStart);
    return Transition{next, std::move(actions)};
  };
  switch (event) {
    case E::kWorkersStarted: return {P::kRunning, {}};
    case E::kWorkerFailed:
      // The others are told first: what the failure was is found after (0.5 ms for the first
      // one), off the path from a worker's exit to its restart. The gasp's signal too: a
      // survivor saves before it finds its peer gone (a collective's error).
      if (s.gasp && phase == P::kRunning) return {P::kGasping, {A::kGasp, A::kReportFirstFailure}};
      return stop(P::kStopping, {A::kTerminateWorkers, A::kReportFirstFailure, A::kArmGraceTimer});
    case E::kPeerFailed:
      if (s.gasp && phase == P::kRunning) return {P::kGasping, {A::kGasp}};
      return stop(P::kStopping, {A::kTerminateWorkers, A::kArmGraceTimer});
    case E::kAllEnded:
      // Every worker succeeded. A start ends with its WorkersStarted before its AllEnded.
      return phase == P::kRunning ? Transition{P::kWaitingForRound, {A::kReportSucceeded}} : Transition{phase, {}};
    case E::kStopRequested: return stop(P::kStopping, {A::kTerminateWorkers, A::kArmGraceTimer});
    case E::kJobFinished: return stop(P::kStoppingToExit, {A::kTerminateWorkers, A::kArmGraceTimer});
    case E::kShutdownSignal: return stop(P::kStoppingToLeave, {A::kTerminateWorkers, A::kArmGraceTimer});
    case E::kFenced: return stop(P::kStopping, {A::kKillWorkers});
    default: return {phase, {}};
  }
}

// Gasping: the survivors of a failure were sent --snapshot_signal and save. The gasp ends when
// its grace passes (GaspEnded: the others are stopped as after any failure), when every survivor
// ended on its own, or at once for what would stop the workers at once anyway; its end is always
// said first (EndGasp).
Transition while_gasping(P phase, E event) {
  switch (event) {
    case E::kWorkerFailed: return {phase, {A::kRecordFailure}};
    case E::kGaspEnded: return {P::kStopping, {A::kEndGasp, A::kTerminateWorkers, A::kArmGraceTimer}};
    case E::kAllEnded: return {P::kCheckingToRejoin, {A::kEndGasp, A::kRunHealthCheck}};
    case E::kShutdownSignal: return {P::kStoppingToLeave, {A::kEndGasp, A::kTerminateWorkers, A::kArmGraceTimer}};
    case E::kJobFinished: return {P::kStoppingToExit, {A::kEndGasp, A::kTerminateWorkers, A::kArmGraceTimer}};
    case E::kFenced: return {P::kStopping, {A::kEndGasp, A::kKillWorkers}};
    default: return {phase, {}};  // a stop request or a failure elsewhere: already stopping
  }
}

// Stopping, StoppingToExit, StoppingToLeave: the workers were told to stop.
Transition while_stopping(P phase, E event) {
  switch (event) {
    case E::kWorkerFailed: return {phase, {A::kRecordFailure}};
    case E::kGraceExpired:
    case E::kFenced: return {phase, {A::kKillWorkers}};
    case E::kAllEnded:
      if (phase == P::kStoppingToLeave) return {P::kExiting, {A::kLeaveRendezvous, A::kExit}};
      if (phase == P::kStoppingToExit) return {P::kExiting, {A::kExit}};
      return {P::kCheckingToRejoin, {A::kRunHealthCheck}};
    case E::kShutdownSignal:
      // A second signal means "now": do not wait out the grace period.
      if (phase == P::kStoppingToLeave) return {phase, {A::kKillWorkers}};
      return {P::kStoppingToLeave, {}};
    case E::kJobFinished:
      // A signal's leave still comes first; the job's end needs no further stop.
      return {phase == P::kStoppingToLeave ? phase : P::kStoppingToExit, {}};
    default: return {phase, {}};  // a stop request: already stopping
  }
}

// CheckingToJoin and CheckingToRejoin: the health check runs; no worker does. Joined or not,
// the node has nothing of the rendezvous's to wait for: before the first join nothing comes, and
// after a stop the rendezvous waits for this node's report (elastic/'s NodeRound holds the job's
// end until then).
Transition while_checking(P phase, E event) {
  const bool joined = phase == P::kCheckingToRejoin;
  switch (event) {
    case E::kHealthCheckPassed: return {P::kWaitingForRound, {joined ? A::kReportStopped : A::kJoinRendezvous}};
    case E::kHealthCheckFailed:
      return {P::kExiting, joined ? std::vector{A::kLeaveQuarantined, A::kExit} : std::vector{A::kExit}};
    case E::kShutdownSignal:
      return {P::kExiting, joined ? std::vector{A::kStopHealthCheck, A::kLeaveRendezvous, A::kExit}
                                  : std::vector{A::kStopHealthCheck, A::kExit}};
    case E::kJobFinished: return {P::kExiting, {A::kStopHealthCheck, A::kExit}};
    case E::kWorkerFailed: return {phase, {A::kNoteFailure}};
    default: return {phase, {}};  // a stop request: the report follows the check
  }
}

}  // namespace

Transition first_transition() { return {P::kCheckingToJoin, {A::kRunHealthCheck}}; }

Transition next_transition(Phase phase, Event event, Supervision supervision) {
  switch (phase) {
    case P::kCheckingToJoin:
    case P::kCheckingToRejoin: return while_checking(phase, event);
    case P::kWaitingForRound:
      switch (event) {
        case E::kRoundStarted: return {P::kStarting, {A::kStartWorkers}};
        case E::kStopRequested:
        case E::kPeerFailed: return {P::kWaitingForRound, {A::kReportStopped}};
        case E::kShutdownSignal: return {P::kExiting, {A::kLeaveRendezvous, A::kExit}};
        case E::kJobFinished: return {P::kExiting, {A::kExit}};
        case E::kWorkerFailed: return {phase, {A::kNoteFailure}};
        default: return {phase, {}};
      }
    case P::kStarting:
    case P::kRunning: return while_up(phase, event, supervision);
    case P::kGasping: return while_gasping(phase, event);
    case P::kStopping:
    case P::kStoppingToExit:
    case P::kStoppingToLeave: return while_stopping(phase, event);
    case P::kExiting: return {phase, event == E::kWorkerFailed ? std::vector{A::kNoteFailure} : std::vector<A>{}};
  }
  return {phase, {}};
}

}  // namespace ddprun::launcher
