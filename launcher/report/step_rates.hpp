// How fast each rank steps, and which ranks lag: the pure part of the live view's progress
// (/status, `ddprun status`), fed with the steps the agent's beats carry and their times
// (monotonic seconds), and asked at the moment of a request.
//
// A rank's steps per second are those of the last minute (kStepRateWindow): the steps it made
// since its last sample at or before `now - 60 s` (or since its first sample, when it has been
// stepping for less than a minute), over the time since that sample. So a rank that stops
// stepping slows down in the view at once, and reads 0 after a minute.
//
// Ranks are compared by their step time: 1 / (steps per second); for a rank without a step for a
// minute or more (stuck after its first step, or after many), the time since its last step. A
// straggler is a running rank whose step time is more than kStragglerLag (20 %) above the median
// step time of the running ranks that have one. The time since the last step counts only from a
// minute on: a rank is seen to step only when it beats (Python's module beats at most every
// 100 ms), so a shorter silence is no sign of lagging; a rank stuck for 10 s lags by 20 % in its
// steps per second (60 / (60 - 10)) anyway.
#pragma once

#include <deque>
#include <optional>
#include <vector>

namespace ddprun::launcher {

inline constexpr double kStepRateWindow = 60;
// Samples closer than this are merged (the newest kept), so a rank's history holds at most
// about kStepRateWindow / kStepSampleGap samples however fast it steps.
inline constexpr double kStepSampleGap = 0.25;
inline constexpr double kStragglerLag = 0.20;

struct StepSample {
  double at = 0;    // monotonic seconds when the step was first seen
  long long step = 0;
};

// One rank's steps over the last minute (and one sample before it).
class StepHistory {
 public:
  // The rank was at `step` at `at` (times never go back). A step below the last one starts the
  // history afresh (the program counts anew, e.g. per epoch); the same step changes nothing.
  void add(double at, long long step);
  const std::deque<StepSample>& samples() const { return samples_; }

 private:
  std::deque<StepSample> samples_;
};

// What the view shows of one rank at a moment.
struct RankPace {
  std::optional<long long> step;            // its last step
  std::optional<double> steps_per_second;   // over the last minute; none before two steps were seen
  std::optional<double> since_last_step;    // seconds since its last step was first seen
  std::optional<double> step_time;          // seconds a step, to compare ranks (see above)
};
RankPace rank_pace(const StepHistory& history, double now);

// What the view shows of the ranks together; only the running ones are compared.
struct PacedRank {
  int rank = 0;
  bool running = false;
  RankPace pace;
};
struct JobPace {
  long long total_steps = 0;                // the last steps of every rank, summed
  std::optional<int> slowest_rank;          // the compared rank with the longest step time (the lowest rank of a tie)
  std::vector<int> stragglers;              // ranks, ascending
  std::optional<double> median_step_time;   // of the compared ranks
};
JobPace job_pace(const std::vector<PacedRank>& ranks);

}  // namespace ddprun::launcher
