#include "supervisor.hpp"

namespace ddprun::launcher {

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kWaitingForRound: return "WaitingForRound";
    case Phase::kRunning: return "Running";
    case Phase::kStopping: return "Stopping";
    case Phase::kExiting: return "Exiting";
  }
  return "?";
}

const char* to_string(Event event) {
  switch (event) {
    case Event::kRoundStarted: return "RoundStarted";
    case Event::kWorkerSucceeded: return "WorkerSucceeded";
    case Event::kWorkerFailed: return "WorkerFailed";
    case Event::kAllEnded: return "AllEnded";
    case Event::kStopRequested: return "StopRequested";
    case Event::kShutdownSignal: return "ShutdownSignal";
    case Event::kGraceExpired: return "GraceExpired";
    case Event::kJobFinished: return "JobFinished";
    case Event::kFenced: return "Fenced";
  }
  return "?";
}

const char* to_string(Action action) {
  switch (action) {
    case Action::kStartWorkers: return "StartWorkers";
    case Action::kReportFirstFailure: return "ReportFirstFailure";
    case Action::kRecordFailure: return "RecordFailure";
    case Action::kTerminateWorkers: return "TerminateWorkers";
    case Action::kArmGraceTimer: return "ArmGraceTimer";
    case Action::kKillWorkers: return "KillWorkers";
    case Action::kReportStopped: return "ReportStopped";
    case Action::kReportSucceeded: return "ReportSucceeded";
    case Action::kLeaveRendezvous: return "LeaveRendezvous";
    case Action::kExit: return "Exit";
  }
  return "?";
}

Transition next_transition(Phase phase, Event event, bool shutting_down, bool job_finished) {
  using A = Action;
  using E = Event;
  using P = Phase;
  const Transition stop{P::kStopping, {A::kTerminateWorkers, A::kArmGraceTimer}};
  switch (phase) {
    case P::kWaitingForRound:
      switch (event) {
        case E::kRoundStarted: return {P::kRunning, {A::kStartWorkers}};
        case E::kStopRequested: return {P::kWaitingForRound, {A::kReportStopped}};
        case E::kShutdownSignal: return {P::kExiting, {A::kLeaveRendezvous, A::kExit}};
        case E::kJobFinished: return {P::kExiting, {A::kExit}};
        default: return {phase, {}};
      }
    case P::kRunning:
      switch (event) {
        case E::kWorkerSucceeded: return {P::kRunning, {}};
        case E::kWorkerFailed:
          // The others are told first: what the failure was is found after (0.5 ms for the
          // first one), off the path from a worker's exit to its restart.
          return {P::kStopping, {A::kTerminateWorkers, A::kReportFirstFailure, A::kArmGraceTimer}};
        case E::kAllEnded: return {P::kWaitingForRound, {A::kReportSucceeded}};
        case E::kStopRequested:
        case E::kShutdownSignal:
        case E::kJobFinished: return stop;
        case E::kFenced: return {P::kStopping, {A::kKillWorkers}};
        default: return {phase, {}};
      }
    case P::kStopping:
      switch (event) {
        case E::kWorkerFailed: return {P::kStopping, {A::kRecordFailure}};
        case E::kGraceExpired:
        case E::kFenced: return {P::kStopping, {A::kKillWorkers}};
        case E::kAllEnded:
          if (shutting_down) return {P::kExiting, {A::kLeaveRendezvous, A::kExit}};
          if (job_finished) return {P::kExiting, {A::kExit}};
          return {P::kWaitingForRound, {A::kReportStopped}};
        case E::kShutdownSignal:
          // A second signal means "now": do not wait out the grace period.
          if (shutting_down) return {P::kStopping, {A::kKillWorkers}};
          return {P::kStopping, {}};
        default: return {phase, {}};  // a stop request or job end: already stopping
      }
    case P::kExiting: return {phase, {}};
  }
  return {phase, {}};
}

}  // namespace ddprun::launcher
