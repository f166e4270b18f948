// The event log's `progress` records: each rank's progress over a round, sampled from its beats
// so that a long job's log stays small. A rank's first beat of a round is written, then a beat
// at most every progress_record_gap(): 1 s over a round's first 100 s, then 1% of the round's
// age, at most 60 s (about 100 records a rank for a round of any length up to 100 min, then one a
// minute: 1,440 a day). `ddprun report` draws them as each rank's progress over time.
#pragma once

#include <map>
#include <optional>

#include "output/event_log.hpp"

namespace ddprun::launcher {

// Seconds between two progress records of a rank, `round_age` seconds after its workers started.
double progress_record_gap(double round_age);

class ProgressSamples {
 public:
  // This node's workers of a round started at `now` (monotonic seconds): every rank's count of
  // beats starts again.
  void workers_started(double now);
  // A beat of `local_rank` (global `rank`) at `at` (monotonic seconds) with its step (none: the
  // worker tells none): the `progress` record to write, when one is due.
  std::optional<EventRecord> beat(int rank, int local_rank, double at, std::optional<long long> step);

 private:
  struct Rank {
    long long beats = 0;
    double last_record = 0;
  };
  double round_start_ = 0;
  std::map<int, Rank> ranks_;  // by local rank
};

}  // namespace ddprun::launcher
