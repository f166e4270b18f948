// Whether a failed round is restarted, as a pure state machine over the job's failed rounds:
// the --max_restarts budget (counted over --restart_window when one is set), what a restart
// cannot fix (a failure kind that is not retryable; the same Python exception at the same place
// twice in a row with no progress in between), and the crash-loop breaker (failures with no
// progress since their round started: a backoff of 1, 2, 4 ... s up to --restart_backoff_max,
// and after --crash_loop_limit of them in a row the job ends). The breaker counts only what a
// restart repeats: the workers' own failure of the same kind at the same place (a Python
// exception's file and line, where there is one) as the last it counted; another failure starts
// a new count, and a kill from outside (kind `killed`: an operator, a scheduler, a chaos test)
// counts nothing and waits no backoff, whenever it lands. No clock: every call carries
// `now`, in seconds on a monotonic clock. The JobCoordinator holds one, so that every node
// gets the same decision.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

struct RestartDecision {
  bool restart = false;
  double backoff = 0;       // seconds to wait before the next round
  RestartReason why;        // a restart's reason, as fields
  std::string reason;       // why not, when not restarting: one line, for the console and the event log
  bool budget_spent = false;  // !restart only because --max_restarts is spent
};

class RestartPolicy {
 public:
  // `restarts_used`: restarts an earlier coordinator of the job already made (counted at `now`).
  RestartPolicy(int max_restarts, RestartSettings settings, int restarts_used, double now);

  // The decision after a round that failed with `root` (its root cause), `progressed` telling
  // whether the round's workers made progress since they started. A restart is counted.
  RestartDecision decide(const WorkerFailure& root, bool progressed, double now);

  // Restarts counted against --max_restarts at `now` (within the window, if any).
  int restarts_counted(double now) const;

  // What the decisions rest on, for a new coordinator of the job to go on from (the etcd
  // leader's state): the restarts' times on this policy's clock, the failures in a row with no
  // progress, the last Python exception.
  struct History {
    std::vector<double> restarts;
    int no_progress = 0;
    std::string last_exception;
    std::string last_counted;  // the kind and place of the last failure the breaker counted
  };
  History history() const;
  // Replaces what the constructor's `restarts_used` gave with `history` (times on the caller's clock).
  void restore(const History& history);

 private:
  int max_restarts_;
  RestartSettings settings_;
  std::deque<double> restarts_;  // when each restart was decided
  int no_progress_ = 0;          // failed rounds in a row with no progress
  std::string last_exception_;   // "Type at file:line" of the last failed round, if a Python exception
  std::string last_counted_;     // the kind and place of the last failure counted in no_progress_
};

}  // namespace ddprun::elastic
