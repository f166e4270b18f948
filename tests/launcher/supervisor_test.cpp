#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "supervisor.hpp"

using namespace ddprun::launcher;
using A = Action;
using E = Event;
using P = Phase;

namespace {

const P kEveryPhase[] = {P::kCheckingToJoin, P::kCheckingToRejoin, P::kWaitingForRound, P::kStarting,
                         P::kRunning,        P::kGasping,          P::kStopping,        P::kStoppingToExit,
                         P::kStoppingToLeave, P::kExiting};

// Calls `check(phase, event, transition)` for every row of the table, with and without the dying
// gasp (--snapshot_signal).
template <typename Check>
void for_every_transition(Check&& check) {
  for (const bool gasp : {false, true}) {
    for (P phase : kEveryPhase) {
      for (int e = 0; e <= static_cast<int>(E::kHealthCheckFailed); ++e) {
        const E event = static_cast<E>(e);
        CAPTURE(gasp);
        CAPTURE(to_string(phase));
        CAPTURE(to_string(event));
        check(phase, event, next_transition(phase, event, Supervision{gasp}));
      }
    }
  }
}

}  // namespace

TEST_CASE("supervisor transitions") {
  struct Row {
    P phase;
    E event;
    P next;
    std::vector<A> actions;
  };
  const std::vector<A> stop = {A::kTerminateWorkers, A::kArmGraceTimer};
  const std::vector<A> cancel_and_stop = {A::kCancelStart, A::kTerminateWorkers, A::kArmGraceTimer};
  const std::vector<Row> table = {
      {P::kWaitingForRound, E::kRoundStarted, P::kStarting, {A::kStartWorkers}},
      {P::kWaitingForRound, E::kJobFinished, P::kExiting, {A::kExit}},
      {P::kWaitingForRound, E::kShutdownSignal, P::kExiting, {A::kLeaveRendezvous, A::kExit}},
      {P::kWaitingForRound, E::kStopRequested, P::kWaitingForRound, {A::kReportStopped}},
      // A failure nothing reports (a worker of a round already over) is still classified and counted.
      {P::kWaitingForRound, E::kWorkerFailed, P::kWaitingForRound, {A::kNoteFailure}},
      {P::kExiting, E::kWorkerFailed, P::kExiting, {A::kNoteFailure}},

      // Starting: every worker forked, or (--warm_start) waiting for the warm interpreter's imports.
      {P::kStarting, E::kWorkersStarted, P::kRunning, {}},
      // A worker that could not start: the others stop; its WorkersStarted then changes nothing.
      {P::kStarting, E::kWorkerFailed, P::kStopping,
       {A::kCancelStart, A::kTerminateWorkers, A::kReportFirstFailure, A::kArmGraceTimer}},
      {P::kStopping, E::kWorkersStarted, P::kStopping, {}},
      // Warm start: a stop, the job's end, a signal or a fence while the workers wait for the warm
      // interpreter ends the wait; none of them starts (then the round's AllEnded follows).
      {P::kStarting, E::kStopRequested, P::kStopping, cancel_and_stop},
      {P::kStarting, E::kJobFinished, P::kStoppingToExit, cancel_and_stop},
      {P::kStarting, E::kShutdownSignal, P::kStoppingToLeave, cancel_and_stop},
      {P::kStarting, E::kFenced, P::kStopping, {A::kCancelStart, A::kKillWorkers}},
      {P::kStarting, E::kWorkerSucceeded, P::kStarting, {}},
      {P::kStarting, E::kGraceExpired, P::kStarting, {}},
      {P::kStarting, E::kRoundStarted, P::kStarting, {}},
      // Its WorkersStarted comes before its AllEnded: a start's own end is no success.
      {P::kStarting, E::kAllEnded, P::kStarting, {}},

      {P::kRunning, E::kWorkerSucceeded, P::kRunning, {}},
      {P::kRunning, E::kAllEnded, P::kWaitingForRound, {A::kReportSucceeded}},
      {P::kRunning, E::kWorkerFailed, P::kStopping, {A::kTerminateWorkers, A::kReportFirstFailure, A::kArmGraceTimer}},
      {P::kRunning, E::kStopRequested, P::kStopping, stop},
      // Without --snapshot_signal, a failure elsewhere stops the workers as any stop request.
      {P::kRunning, E::kPeerFailed, P::kStopping, stop},
      {P::kStarting, E::kPeerFailed, P::kStopping, cancel_and_stop},
      {P::kWaitingForRound, E::kPeerFailed, P::kWaitingForRound, {A::kReportStopped}},
      {P::kStopping, E::kPeerFailed, P::kStopping, {}},
      {P::kCheckingToRejoin, E::kPeerFailed, P::kCheckingToRejoin, {}},
      // A gasp's timer of a round already stopped otherwise changes nothing.
      {P::kStopping, E::kGaspEnded, P::kStopping, {}},
      {P::kRunning, E::kGaspEnded, P::kRunning, {}},
      {P::kCheckingToRejoin, E::kGaspEnded, P::kCheckingToRejoin, {}},
      {P::kRunning, E::kShutdownSignal, P::kStoppingToLeave, stop},
      {P::kRunning, E::kJobFinished, P::kStoppingToExit, stop},
      {P::kRunning, E::kWorkersStarted, P::kRunning, {}},

      {P::kStopping, E::kWorkerFailed, P::kStopping, {A::kRecordFailure}},
      {P::kStoppingToExit, E::kWorkerFailed, P::kStoppingToExit, {A::kRecordFailure}},
      {P::kStoppingToLeave, E::kWorkerFailed, P::kStoppingToLeave, {A::kRecordFailure}},
      {P::kStopping, E::kWorkerSucceeded, P::kStopping, {}},
      {P::kStopping, E::kGraceExpired, P::kStopping, {A::kKillWorkers}},
      {P::kStoppingToExit, E::kGraceExpired, P::kStoppingToExit, {A::kKillWorkers}},
      {P::kStoppingToLeave, E::kGraceExpired, P::kStoppingToLeave, {A::kKillWorkers}},
      // Stopped: the health check before the node rejoins (reports the stop).
      {P::kStopping, E::kAllEnded, P::kCheckingToRejoin, {A::kRunHealthCheck}},
      {P::kStoppingToLeave, E::kAllEnded, P::kExiting, {A::kLeaveRendezvous, A::kExit}},
      {P::kStoppingToExit, E::kAllEnded, P::kExiting, {A::kExit}},
      // A signal while stopping: leave once stopped; a second one means "now".
      {P::kStopping, E::kShutdownSignal, P::kStoppingToLeave, {}},
      {P::kStoppingToExit, E::kShutdownSignal, P::kStoppingToLeave, {}},
      {P::kStoppingToLeave, E::kShutdownSignal, P::kStoppingToLeave, {A::kKillWorkers}},
      // The job's end while stopping: exit once stopped, unless a signal's leave comes first.
      {P::kStopping, E::kJobFinished, P::kStoppingToExit, {}},
      {P::kStoppingToLeave, E::kJobFinished, P::kStoppingToLeave, {}},
      {P::kStopping, E::kStopRequested, P::kStopping, {}},
      {P::kStoppingToExit, E::kStopRequested, P::kStoppingToExit, {}},
      {P::kExiting, E::kAllEnded, P::kExiting, {}},

      // Fenced: the job may re-form without this node at any moment; no grace, no report.
      {P::kRunning, E::kFenced, P::kStopping, {A::kKillWorkers}},
      {P::kStopping, E::kFenced, P::kStopping, {A::kKillWorkers}},
      {P::kStoppingToExit, E::kFenced, P::kStoppingToExit, {A::kKillWorkers}},
      {P::kStoppingToLeave, E::kFenced, P::kStoppingToLeave, {A::kKillWorkers}},
      {P::kWaitingForRound, E::kFenced, P::kWaitingForRound, {}},
      {P::kExiting, E::kFenced, P::kExiting, {}},

      // The health check (--health_check): before the first join, and before the report of a stop
      // that lets the rendezvous put the node in its next round.
      {P::kCheckingToJoin, E::kHealthCheckPassed, P::kWaitingForRound, {A::kJoinRendezvous}},
      {P::kCheckingToRejoin, E::kHealthCheckPassed, P::kWaitingForRound, {A::kReportStopped}},
      // Exit 1: the node leaves as quarantined; not joined yet, it has no one to tell.
      {P::kCheckingToJoin, E::kHealthCheckFailed, P::kExiting, {A::kExit}},
      {P::kCheckingToRejoin, E::kHealthCheckFailed, P::kExiting, {A::kLeaveQuarantined, A::kExit}},
      // A signal while it runs: the check is killed, the node leaves as on any signal.
      {P::kCheckingToJoin, E::kShutdownSignal, P::kExiting, {A::kStopHealthCheck, A::kExit}},
      {P::kCheckingToRejoin, E::kShutdownSignal, P::kExiting,
       {A::kStopHealthCheck, A::kLeaveRendezvous, A::kExit}},
      {P::kCheckingToRejoin, E::kJobFinished, P::kExiting, {A::kStopHealthCheck, A::kExit}},
      // The rendezvous waits for the report that follows the check.
      {P::kCheckingToRejoin, E::kStopRequested, P::kCheckingToRejoin, {}},
      {P::kCheckingToRejoin, E::kFenced, P::kCheckingToRejoin, {}},
      {P::kCheckingToRejoin, E::kGraceExpired, P::kCheckingToRejoin, {}},
      {P::kCheckingToRejoin, E::kAllEnded, P::kCheckingToRejoin, {}},
      {P::kCheckingToRejoin, E::kWorkerFailed, P::kCheckingToRejoin, {A::kNoteFailure}},
      // No other phase runs a check, so none hears of one ending.
      {P::kWaitingForRound, E::kHealthCheckPassed, P::kWaitingForRound, {}},
      {P::kRunning, E::kHealthCheckFailed, P::kRunning, {}},
  };
  const Transition first = first_transition();
  CHECK(first.next == P::kCheckingToJoin);
  CHECK(first.actions == std::vector<A>{A::kRunHealthCheck});
  for (const auto& row : table) {
    CAPTURE(to_string(row.phase));
    CAPTURE(to_string(row.event));
    const Transition t = next_transition(row.phase, row.event);
    CHECK(t.next == row.next);
    CHECK(t.actions == row.actions);
  }
}

TEST_CASE("the dying gasp (--snapshot_signal): a phase between a failure and the stop") {
  struct Row {
    P phase;
    E event;
    P next;
    std::vector<A> actions;
  };
  const std::vector<Row> table = {
      // A failure here: the survivors get the signal first, then the rendezvous is told (which
      // stops the other nodes, whose workers gasp too).
      {P::kRunning, E::kWorkerFailed, P::kGasping, {A::kGasp, A::kReportFirstFailure}},
      // A failure elsewhere (a worker, a lost node): this node's workers hold the same step.
      {P::kRunning, E::kPeerFailed, P::kGasping, {A::kGasp}},
      // A membership change or a shutdown of the rendezvous is no failure: no gasp.
      {P::kRunning, E::kStopRequested, P::kStopping, {A::kTerminateWorkers, A::kArmGraceTimer}},
      // A start under way took no step yet: stopped at once, as without a gasp.
      {P::kStarting, E::kWorkerFailed, P::kStopping,
       {A::kCancelStart, A::kTerminateWorkers, A::kReportFirstFailure, A::kArmGraceTimer}},
      {P::kStarting, E::kPeerFailed, P::kStopping, {A::kCancelStart, A::kTerminateWorkers, A::kArmGraceTimer}},
      // The grace passed (or another source ended it): the gasp is said, the rest stopped as now.
      {P::kGasping, E::kGaspEnded, P::kStopping, {A::kEndGasp, A::kTerminateWorkers, A::kArmGraceTimer}},
      // Every survivor saved and ended on its own: nothing left to stop.
      {P::kGasping, E::kAllEnded, P::kCheckingToRejoin, {A::kEndGasp, A::kRunHealthCheck}},
      // A second failure during the gasp is recorded as after the first (not the root cause);
      // the gasp goes on for the others.
      {P::kGasping, E::kWorkerFailed, P::kGasping, {A::kRecordFailure}},
      {P::kGasping, E::kWorkerSucceeded, P::kGasping, {}},
      // Already stopping: the rendezvous's stop (for this very failure) changes nothing.
      {P::kGasping, E::kStopRequested, P::kGasping, {}},
      {P::kGasping, E::kPeerFailed, P::kGasping, {}},
      // A signal to ddprun, the job's end or a fence cut the gasp short: its end is said first.
      {P::kGasping, E::kShutdownSignal, P::kStoppingToLeave, {A::kEndGasp, A::kTerminateWorkers, A::kArmGraceTimer}},
      {P::kGasping, E::kJobFinished, P::kStoppingToExit, {A::kEndGasp, A::kTerminateWorkers, A::kArmGraceTimer}},
      {P::kGasping, E::kFenced, P::kStopping, {A::kEndGasp, A::kKillWorkers}},
      // No stop's grace is armed during the gasp, no worker starts, no check runs.
      {P::kGasping, E::kGraceExpired, P::kGasping, {}},
      {P::kGasping, E::kWorkersStarted, P::kGasping, {}},
      {P::kGasping, E::kRoundStarted, P::kGasping, {}},
      {P::kGasping, E::kHealthCheckPassed, P::kGasping, {}},
      // After the gasp, everything is as without one.
      {P::kStopping, E::kGaspEnded, P::kStopping, {}},
      {P::kStopping, E::kAllEnded, P::kCheckingToRejoin, {A::kRunHealthCheck}},
  };
  for (const auto& row : table) {
    CAPTURE(to_string(row.phase));
    CAPTURE(to_string(row.event));
    const Transition t = next_transition(row.phase, row.event, Supervision{true});
    CHECK(t.next == row.next);
    CHECK(t.actions == row.actions);
  }
  CHECK(is_stopping(P::kGasping));  // a failure now comes after another
  CHECK_FALSE(is_up(P::kGasping));
}

TEST_CASE("the gasp changes only what follows a failure while the workers run, and is always said once") {
  for_every_transition([](P phase, E event, const Transition& t) {
    const auto has = [&](A a) { return std::count(t.actions.begin(), t.actions.end(), a) > 0; };
    const Transition off = next_transition(phase, event, Supervision{false});
    if (phase == P::kRunning && (event == E::kWorkerFailed || event == E::kPeerFailed)) {
      // The one difference: the gasp instead of the stop, and only where asked for.
      CHECK(has(A::kGasp) == (t.next == P::kGasping));
    } else {
      CHECK(t.next == off.next);
      CHECK(t.actions == off.actions);
      CHECK_FALSE(has(A::kGasp));
    }
    // Gasping is entered only with a Gasp, and left only with its end said, first.
    if (phase != P::kGasping && t.next == P::kGasping) CHECK(has(A::kGasp));
    if (phase == P::kGasping && t.next != P::kGasping) {
      REQUIRE_FALSE(t.actions.empty());
      CHECK(t.actions.front() == A::kEndGasp);
    }
    if (has(A::kEndGasp)) CHECK(phase == P::kGasping);
    // Nothing stops the workers during the gasp but the end of it.
    if (phase == P::kGasping && t.next == P::kGasping) {
      CHECK_FALSE(has(A::kTerminateWorkers));
      CHECK_FALSE(has(A::kKillWorkers));
    }
  });
}

TEST_CASE("the phase as /status names it") {
  const std::vector<std::pair<P, std::string>> table = {
      {P::kCheckingToJoin, "waiting"},  {P::kCheckingToRejoin, "waiting"},
      {P::kWaitingForRound, "waiting"}, {P::kStarting, "running"},        {P::kRunning, "running"},
      {P::kGasping, "stopping"},
      {P::kStopping, "stopping"},       {P::kStoppingToExit, "stopping"}, {P::kStoppingToLeave, "stopping"},
      {P::kExiting, "exiting"},
  };
  // Not a structured binding: CAPTURE's lambda cannot name one in C++17 (clang refuses).
  for (const auto& row : table) {
    CAPTURE(to_string(row.first));
    CHECK(status_name(row.first) == row.second);
  }
}

TEST_CASE("every failure, in every phase, is classified and counted once") {
  // ReportFirstFailure and RecordFailure find its kind too; NoteFailure only that.
  for (const bool gasp : {false, true}) {
    for (P phase : kEveryPhase) {
      CAPTURE(gasp);
      CAPTURE(to_string(phase));
      const auto actions = next_transition(phase, E::kWorkerFailed, Supervision{gasp}).actions;
      const auto count = std::count_if(actions.begin(), actions.end(), [](A a) {
        return a == A::kReportFirstFailure || a == A::kRecordFailure || a == A::kNoteFailure;
      });
      CHECK(count == 1);
    }
  }
}

TEST_CASE("no worker starts once a stop began, and a start under way is cancelled by every stop") {
  for_every_transition([](P phase, E event, const Transition& t) {
    const bool starts = std::count(t.actions.begin(), t.actions.end(), A::kStartWorkers) > 0;
    CHECK((!starts || (phase == P::kWaitingForRound && event == E::kRoundStarted)));
    if (phase == P::kStarting && t.next != P::kStarting && t.next != P::kRunning) {
      REQUIRE_FALSE(t.actions.empty());
      CHECK(t.actions.front() == A::kCancelStart);
    }
  });
}

TEST_CASE("the node joins or reports a stop only once its health check passed, and never after it failed") {
  for_every_transition([](P phase, E event, const Transition& t) {
    const auto has = [&](A a) { return std::count(t.actions.begin(), t.actions.end(), a) > 0; };
    CHECK((!has(A::kJoinRendezvous) || (phase == P::kCheckingToJoin && event == E::kHealthCheckPassed)));
    CHECK((!has(A::kLeaveQuarantined) || (phase == P::kCheckingToRejoin && event == E::kHealthCheckFailed)));
    if (has(A::kReportStopped)) CHECK(phase != P::kStopping);  // a stop's report waits for the check
    // A check left running is killed on the way out.
    if ((phase == P::kCheckingToJoin || phase == P::kCheckingToRejoin) && t.next == P::kExiting &&
        event != E::kHealthCheckFailed) {
      CHECK(has(A::kStopHealthCheck));
    }
  });
}
