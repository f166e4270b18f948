#include <doctest/doctest.h>

#include "supervisor.hpp"

using namespace ddprun::launcher;
using A = Action;
using E = Event;
using P = Phase;

TEST_CASE("supervisor transitions") {
  struct Row {
    P phase;
    E event;
    bool shutting_down;
    bool job_finished;
    P next;
    std::vector<A> actions;
  };
  const std::vector<Row> table = {
      {P::kWaitingForRound, E::kRoundStarted, false, false, P::kRunning, {A::kStartWorkers}},
      {P::kWaitingForRound, E::kJobFinished, false, true, P::kExiting, {A::kExit}},
      {P::kWaitingForRound, E::kShutdownSignal, false, false, P::kExiting, {A::kLeaveRendezvous, A::kExit}},
      {P::kWaitingForRound, E::kStopRequested, false, false, P::kWaitingForRound, {A::kReportStopped}},
      {P::kRunning, E::kWorkerSucceeded, false, false, P::kRunning, {}},
      {P::kRunning, E::kAllEnded, false, false, P::kWaitingForRound, {A::kReportSucceeded}},
      {P::kRunning, E::kWorkerFailed, false, false, P::kStopping,
       {A::kTerminateWorkers, A::kReportFirstFailure, A::kArmGraceTimer}},
      {P::kRunning, E::kStopRequested, false, false, P::kStopping, {A::kTerminateWorkers, A::kArmGraceTimer}},
      {P::kRunning, E::kShutdownSignal, false, false, P::kStopping, {A::kTerminateWorkers, A::kArmGraceTimer}},
      {P::kRunning, E::kJobFinished, false, true, P::kStopping, {A::kTerminateWorkers, A::kArmGraceTimer}},
      {P::kStopping, E::kWorkerFailed, false, false, P::kStopping, {A::kRecordFailure}},
      {P::kStopping, E::kWorkerSucceeded, false, false, P::kStopping, {}},
      {P::kStopping, E::kGraceExpired, false, false, P::kStopping, {A::kKillWorkers}},
      {P::kStopping, E::kAllEnded, false, false, P::kWaitingForRound, {A::kReportStopped}},
      {P::kStopping, E::kAllEnded, true, false, P::kExiting, {A::kLeaveRendezvous, A::kExit}},
      {P::kStopping, E::kAllEnded, false, true, P::kExiting, {A::kExit}},
      {P::kStopping, E::kShutdownSignal, false, false, P::kStopping, {}},
      {P::kStopping, E::kShutdownSignal, true, false, P::kStopping, {A::kKillWorkers}},
      {P::kStopping, E::kStopRequested, false, false, P::kStopping, {}},
      {P::kExiting, E::kWorkerFailed, false, false, P::kExiting, {}},
      // Fenced: the job may re-form without this node at any moment; no grace, no report.
      {P::kRunning, E::kFenced, false, false, P::kStopping, {A::kKillWorkers}},
      {P::kStopping, E::kFenced, false, false, P::kStopping, {A::kKillWorkers}},
      {P::kWaitingForRound, E::kFenced, false, false, P::kWaitingForRound, {}},
      {P::kExiting, E::kFenced, false, false, P::kExiting, {}},
  };
  for (const auto& row : table) {
    CAPTURE(to_string(row.phase));
    CAPTURE(to_string(row.event));
    CAPTURE(row.shutting_down);
    const Transition t = next_transition(row.phase, row.event, row.shutting_down, row.job_finished);
    CHECK(t.next == row.next);
    CHECK(t.actions == row.actions);
  }
}
