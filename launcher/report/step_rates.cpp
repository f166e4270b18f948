#include "report/step_rates.hpp"

#include <algorithm>

namespace ddprun::launcher {

void StepHistory::add(double at, long long step) {
  if (!samples_.empty() && step < samples_.back().step) samples_.clear();
  if (!samples_.empty() && step == samples_.back().step) return;
  const std::size_t n = samples_.size();
  if (n >= 2 && at - samples_[n - 2].at < kStepSampleGap) {
    samples_.back() = {at, step};
  } else {
    samples_.push_back({at, step});
  }
  // Keep one sample at or before the window's start: the base the rate counts from.
  while (samples_.size() >= 2 && samples_[1].at <= at - kStepRateWindow) samples_.pop_front();
}

RankPace rank_pace(const StepHistory& history, double now) {
  RankPace pace;
  const auto& samples = history.samples();
  if (samples.empty()) return pace;
  const StepSample& last = samples.back();
  pace.step = last.step;
  pace.since_last_step = std::max(0.0, now - last.at);
  if (samples.size() >= 2) {
    const StepSample* base = &samples.front();
    for (const auto& s : samples) {
      if (s.at > now - kStepRateWindow) break;
      base = &s;
    }
    if (now > base->at) pace.steps_per_second = static_cast<double>(last.step - base->step) / (now - base->at);
  }
  if (pace.steps_per_second && *pace.steps_per_second > 0) {
    pace.step_time = 1 / *pace.steps_per_second;
  } else if (*pace.since_last_step >= kStepRateWindow) {
    pace.step_time = pace.since_last_step;
  }
  return pace;
}

JobPace job_pace(const std::vector<PacedRank>& ranks) {
  JobPace job;
  std::vector<double> times;
  double slowest_time = 0;
  for (const auto& r : ranks) {
    job.total_steps += r.pace.step.value_or(0);
    if (!r.running || !r.pace.step_time) continue;
    times.push_back(*r.pace.step_time);
    if (!job.slowest_rank || *r.pace.step_time > slowest_time ||
        (*r.pace.step_time == slowest_time && r.rank < *job.slowest_rank)) {
      job.slowest_rank = r.rank;
      slowest_time = *r.pace.step_time;
    }
  }
  if (times.empty()) return job;
  std::sort(times.begin(), times.end());
  const std::size_t mid = times.size() / 2;
  const double median = times.size() % 2 == 1 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
  job.median_step_time = median;
  for (const auto& r : ranks) {
    if (r.running && r.pace.step_time && *r.pace.step_time > median * (1 + kStragglerLag)) {
      job.stragglers.push_back(r.rank);
    }
  }
  std::sort(job.stragglers.begin(), job.stragglers.end());
  return job;
}

}  // namespace ddprun::launcher
