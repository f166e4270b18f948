// The goodput ledger (issue 58, item 1): where one node's wall time went, from what its agent
// saw (its workers' starts and first beats, failures, stops, the snapshot folder's commits), and
// the job's effective training time by Meta's formula:
//
//   ETT% = 100% − idleness% − failure%
//   idleness = time to start + idle;  failure = time spent recovering + work redone;
//   wall = starting + training + recovering + idle (every second in exactly one of them).
//
// Pure: times are seconds on one clock (ddprun's monotonic clock), given by the caller; tested as
// a table (tests/launcher/goodput_ledger_test.cpp). What each field means, for users:
// docs/reference/goodput.md.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "output/event_log.hpp"

namespace ddprun::launcher {

// The kind a failure seen as a round stop from the rendezvous (a failure on another node, a node
// lost) is counted as: this node does not know the other node's kind.
inline constexpr const char* kAnotherNode = "another_node";

struct GoodputFailure {
  double at = 0;       // seconds since ddprun's start
  std::string kind;    // the failure kind (config/'s vocabulary), or kAnotherNode
  std::optional<double> waited;        // the failure → this node's workers started again
  std::optional<double> recovered_in;  // the failure → every rank's first beat after it; null: not yet
  std::optional<double> redone;        // work lost and redone; null: unknown (or not decided yet)
  double training_since = -1;          // when the training stretch it ended began; -1: none
  bool decided = false;                // `redone` is final (the next start, or the job's end)
  bool injected = false;               // a fault --chaos injected (a rehearsal), not a real failure
};

struct GoodputFigures {
  double wall = 0;  // ddprun's start → now (or its exit)
  std::optional<double> time_to_start;  // null: not every rank has made progress yet
  double starting = 0, training = 0, recovering = 0, idle = 0;  // the four buckets; their sum is wall
  std::vector<GoodputFailure> failures;
  std::map<std::string, int> failures_by_kind;
  int injected = 0;             // failures that --chaos injected (each also counted by its kind)
  double redone = 0;            // the sum of the known `redone`
  int redone_unknown = 0;       // failures whose work redone is unknown
  std::optional<double> ett;    // percent; null: no rank made progress, nothing to judge
  bool ett_upper_bound = false; // some work redone is unknown: ETT% is at most this
};

class GoodputLedger {
 public:
  // `start`: ddprun's start. `snapshots`: the job has a snapshot folder whose commits are watched
  // (without one, work redone is unknown).
  GoodputLedger(double start, bool snapshots) : start_(start), snapshots_(snapshots), since_(start) {}

  // This node's workers of a new round started: `ranks` of them, none has made progress yet.
  void workers_started(double t, int ranks);
  // A beat of `local_rank`. When it was the last rank to make progress since the workers started,
  // training (re)starts now, and what it ended is returned: "started" (the time to start),
  // "recovered" (a failure's recovery), "resumed" (after an idle wait); else null.
  const char* progress(double t, int local_rank);
  // The round stopped for a failure (this node's first failed worker of the round, with its kind,
  // or kAnotherNode). Only the first failure of a round counts: what follows is the same stop.
  // `injected`: --chaos caused it (a rehearsal).
  void failure(double t, const std::string& kind, bool injected = false);
  // The round stopped for anything else (a change of members, a signal, the workers succeeded,
  // the job's end): training, if it ran, stops; the time until it resumes is idle.
  void stopped(double t);
  // Whether every rank has made progress since the workers started and the round has not stopped.
  bool training() const { return state_ == State::kTraining; }
  // A file in the snapshot folder was committed.
  void committed(double t) { last_commit_ = t; }

  // The figures as of `now` (the open stretch counted up to it).
  GoodputFigures figures(double now) const;

 private:
  enum class State { kStarting, kTraining, kRecovering, kIdle };
  void close(double t);  // adds [since_, t) to the current state's bucket
  void decide_redone(GoodputFailure& f) const;

  double start_;
  bool snapshots_;
  State state_ = State::kStarting;
  double since_ = 0;  // absolute: when the current state began
  double buckets_[4] = {0, 0, 0, 0};
  std::optional<double> time_to_start_;
  int ranks_ = 0;
  std::vector<bool> progressed_;
  bool running_ = false;          // workers started, every rank not yet progressed or training
  bool failed_this_round_ = false;
  std::optional<double> last_commit_;
  std::vector<GoodputFailure> failures_;
};

// The summary's words: "goodput 96.1%: started in 4.2 s, 3 failures (2 host_oom, 1 hang) cost
// 1.9 s, 12.0 s of work redone", or what is unknown (no newline).
std::string goodput_text(const GoodputFigures& f);

// The figures as --result_file's "goodput", /status's "goodput" and the event log's records,
// with goodput_text() as "summary".
nlohmann::json goodput_json(const GoodputFigures& f);

// The event log's `goodput` record: the figures, and `why` (started, recovered, resumed, exit).
EventRecord goodput_record(const GoodputFigures& f, std::string_view why);

}  // namespace ddprun::launcher
