// Steps per second over the last minute, the slowest rank and the stragglers, as tables.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/step_rates.hpp"

using namespace ddprun::launcher;

namespace {

StepHistory history_of(const std::vector<std::pair<double, long long>>& beats) {
  StepHistory h;
  for (const auto& [at, step] : beats) h.add(at, step);
  return h;
}

// A rank that made one step a second, step N at second N, from `from` to `to`.
std::vector<std::pair<double, long long>> steady(int from, int to) {
  std::vector<std::pair<double, long long>> beats;
  for (int t = from; t <= to; ++t) beats.emplace_back(t, t);
  return beats;
}

}  // namespace

TEST_CASE("a rank's step history: new steps only, merged when close, one sample before the minute") {
  struct Row {
    const char* what;
    std::vector<std::pair<double, long long>> beats;
    std::vector<std::pair<double, long long>> kept;
  };
  const std::vector<Row> table = {
      {"every step", {{0, 1}, {1, 2}, {2, 3}}, {{0, 1}, {1, 2}, {2, 3}}},
      {"the same step again is no new sample", {{0, 1}, {1, 1}, {2, 1}}, {{0, 1}}},
      {"a lower step starts afresh", {{0, 5}, {1, 6}, {2, 1}}, {{2, 1}}},
      {"steps closer than the gap: the newest replaces the last",
       {{0, 1}, {1, 2}, {1.1, 3}, {1.2, 4}},
       {{0, 1}, {1, 2}, {1.2, 4}}},
      {"the first two are never merged", {{0, 1}, {0.01, 2}}, {{0, 1}, {0.01, 2}}},
      {"older than a minute: all but the last before the window go", {{0, 1}, {30, 2}, {91, 3}}, {{30, 2}, {91, 3}}},
      {"within a minute: all stay", {{0, 1}, {30, 2}, {60, 3}}, {{0, 1}, {30, 2}, {60, 3}}},
  };
  for (const auto& row : table) {
    CAPTURE(std::string(row.what));
    const StepHistory h = history_of(row.beats);
    std::vector<std::pair<double, long long>> kept;
    for (const auto& s : h.samples()) kept.emplace_back(s.at, s.step);
    CHECK(kept == row.kept);
  }
  // However fast a rank steps, its history stays small: a sample per gap in the minute, the one
  // before it, the newest (and one for the rounding of the times).
  StepHistory fast;
  for (int i = 0; i < 100000; ++i) fast.add(i * 0.001, i);
  CHECK(fast.samples().size() <= kStepRateWindow / kStepSampleGap + 3);
}

TEST_CASE("a rank's pace at a moment") {
  struct Row {
    const char* what;
    std::vector<std::pair<double, long long>> beats;
    double now;
    std::optional<long long> step;
    std::optional<double> steps_per_second;
    std::optional<double> since_last_step;
    std::optional<double> step_time;
  };
  const std::vector<Row> table = {
      {"no step yet", {}, 5, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
      {"one step: no rate yet", {{10, 5}}, 11, 5, std::nullopt, 1.0, std::nullopt},
      {"one step, then a minute of nothing: compared by its silence", {{10, 5}}, 80, 5, std::nullopt, 70.0, 70.0},
      {"one a second for the first 2 s", steady(0, 2), 2, 2, 1.0, 0.0, 1.0},
      {"one a second for 100 s: the last minute counts", steady(0, 100), 100, 100, 1.0, 0.0, 1.0},
      {"a step every 2 s", {{0, 0}, {2, 1}, {4, 2}, {6, 3}}, 6, 3, 0.5, 0.0, 2.0},
      {"stuck for 30 s after 100: half the rate", steady(0, 100), 130, 100, 0.5, 30.0, 2.0},
      {"stuck for 70 s: no step in the minute", steady(0, 100), 170, 100, 0.0, 70.0, 70.0},
  };
  for (const auto& row : table) {
    CAPTURE(std::string(row.what));
    const RankPace pace = rank_pace(history_of(row.beats), row.now);
    CHECK(pace.step == row.step);
    REQUIRE(pace.steps_per_second.has_value() == row.steps_per_second.has_value());
    if (row.steps_per_second) CHECK(*pace.steps_per_second == doctest::Approx(*row.steps_per_second));
    REQUIRE(pace.since_last_step.has_value() == row.since_last_step.has_value());
    if (row.since_last_step) CHECK(*pace.since_last_step == doctest::Approx(*row.since_last_step));
    REQUIRE(pace.step_time.has_value() == row.step_time.has_value());
    if (row.step_time) CHECK(*pace.step_time == doctest::Approx(*row.step_time));
  }
}

TEST_CASE("the job's pace: total steps, the slowest rank, the stragglers") {
  // A rank at `step` taking `step_time` s a step; std::nullopt: not comparable yet.
  const auto rank = [](int r, bool running, std::optional<long long> step, std::optional<double> step_time) {
    PacedRank p;
    p.rank = r;
    p.running = running;
    p.pace.step = step;
    p.pace.step_time = step_time;
    return p;
  };
  struct Row {
    const char* what;
    std::vector<PacedRank> ranks;
    long long total;
    std::optional<int> slowest;
    std::vector<int> stragglers;
    std::optional<double> median;
  };
  const std::vector<Row> table = {
      {"no ranks", {}, 0, std::nullopt, {}, std::nullopt},
      {"no steps yet", {rank(0, true, std::nullopt, std::nullopt)}, 0, std::nullopt, {}, std::nullopt},
      {"one rank is the slowest and no straggler", {rank(0, true, 10, 1.0)}, 10, 0, {}, 1.0},
      {"even: all alike, the lowest rank of the tie",
       {rank(0, true, 5, 1.0), rank(1, true, 5, 1.0)}, 10, 0, {}, 1.0},
      {"30 % over the median lags",
       {rank(0, true, 9, 1.0), rank(1, true, 9, 1.0), rank(2, true, 9, 1.0), rank(3, true, 7, 1.3)},
       34, 3, {3}, 1.0},
      {"19 % over the median does not",
       {rank(0, true, 9, 1.0), rank(1, true, 9, 1.0), rank(2, true, 9, 1.19)}, 27, 2, {}, 1.0},
      {"two ranks: the median is between them",
       {rank(0, true, 9, 1.0), rank(1, true, 5, 2.0)}, 14, 1, {1}, 1.5},
      {"several stragglers, by rank",
       {rank(3, true, 1, 70.0), rank(0, true, 9, 1.0), rank(1, true, 9, 1.0), rank(2, true, 9, 1.0),
        rank(4, true, 2, 1.5)},
       30, 3, {3, 4}, 1.0},
      {"an exited rank counts its steps but is not compared",
       {rank(0, true, 9, 1.0), rank(1, false, 3, 99.0), rank(2, true, 9, 1.0)}, 21, 0, {}, 1.0},
      {"a rank without a step time is not compared",
       {rank(0, true, 9, 1.0), rank(1, true, 1, std::nullopt), rank(2, true, 9, 1.1)}, 19, 2, {}, 1.05},
  };
  for (const auto& row : table) {
    CAPTURE(std::string(row.what));
    const JobPace job = job_pace(row.ranks);
    CHECK(job.total_steps == row.total);
    CHECK(job.slowest_rank == row.slowest);
    CHECK(job.stragglers == row.stragglers);
    REQUIRE(job.median_step_time.has_value() == row.median.has_value());
    if (row.median) CHECK(*job.median_step_time == doctest::Approx(*row.median));
  }
}
