#include "report/progress_samples.hpp"

#include <algorithm>

#include "report/event_records.hpp"

namespace ddprun::launcher {

double progress_record_gap(double round_age) { return std::clamp(round_age / 100.0, 1.0, 60.0); }

void ProgressSamples::workers_started(double now) {
  round_start_ = now;
  ranks_.clear();
}

std::optional<EventRecord> ProgressSamples::beat(int rank, int local_rank, double at, std::optional<long long> step) {
  Rank& r = ranks_[local_rank];
  ++r.beats;
  if (r.beats > 1 && at - r.last_record < progress_record_gap(at - round_start_)) return std::nullopt;
  r.last_record = at;
  return records::progress(rank, local_rank, step, r.beats);
}

}  // namespace ddprun::launcher
