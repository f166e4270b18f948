#include "hangs/hang_policy.hpp"

#include <algorithm>

namespace ddprun::launcher {

using Mode = config::HangTimeout::Mode;

HangPolicy::HangPolicy(config::HangTimeout setting, double quiet_after)
    : setting_(setting), quiet_after_(quiet_after) {}

void HangPolicy::start_round(int ranks, double now) {
  round_start_ = now;
  ranks_.assign(static_cast<size_t>(ranks), Rank{});
  any_beat_ = false;
}

double HangPolicy::floor() const {
  return setting_.seconds > 0 ? setting_.seconds : kAutoFloor;
}

double HangPolicy::timeout() const {
  switch (setting_.mode) {
    case Mode::kOff: return 0;
    case Mode::kFixed: return setting_.seconds;
    case Mode::kAuto: return learned_ > 0 ? std::max(floor(), learned_) : 0;
  }
  return 0;
}

std::optional<double> HangPolicy::beat(int local_rank, double now, std::optional<long long> step) {
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return std::nullopt;
  Rank& r = ranks_[static_cast<size_t>(local_rank)];
  const double before = timeout();
  if (r.last_beat && ++r.intervals > kWarmupIntervals) {
    learned_ = std::max(learned_, kAutoFactor * (now - *r.last_beat - r.held(now)));
  }
  r.last_beat = now;
  if (step) r.step = step;
  r.said_quiet = false;
  r.paused_for = 0;
  if (r.paused_streams > 0) r.paused_at = now;
  any_beat_ = true;
  const double after = timeout();
  if (setting_.mode == Mode::kAuto && after > before) return after;
  return std::nullopt;
}

void HangPolicy::step_recorded(int local_rank, long long step) {
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return;
  ranks_[static_cast<size_t>(local_rank)].step = step;
}

void HangPolicy::output_paused(int local_rank, bool paused, double now) {
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return;
  Rank& r = ranks_[static_cast<size_t>(local_rank)];
  if (paused) {
    if (r.paused_streams++ == 0) r.paused_at = now;
  } else if (r.paused_streams > 0 && --r.paused_streams == 0) {
    r.paused_for += now - r.paused_at;
  }
}

std::optional<double> HangPolicy::deadline(const Rank& r) const {
  if (setting_.mode == Mode::kOff) return std::nullopt;
  if (r.paused_streams > 0) return std::nullopt;  // held back by ddprun: its clock stands still
  if (r.ended) return std::nullopt;
  if (!r.last_beat) {
    // Under auto, a program that never beats is not judged at all.
    if (setting_.mode == Mode::kAuto && !any_beat_) return std::nullopt;
    return round_start_ + r.paused_for + setting_.startup;
  }
  if (timeout() <= 0) return std::nullopt;  // auto, not learned yet
  return *r.last_beat + r.paused_for + timeout();
}

std::vector<HungRank> HangPolicy::hung(double now) const {
  std::vector<HungRank> out;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const auto at = deadline(ranks_[i]);
    if (!at || now < *at) continue;
    out.push_back(standing(static_cast<int>(i), now));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const HungRank& a, const HungRank& b) { return a.silent_for > b.silent_for; });
  return out;
}

HungRank HangPolicy::standing(int local_rank, double now) const {
  HungRank h;
  h.local_rank = local_rank;
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return h;
  const Rank& r = ranks_[static_cast<size_t>(local_rank)];
  h.silent_for = silent_for(local_rank, now);
  h.ever_beat = r.last_beat.has_value();
  h.timeout = h.ever_beat ? timeout() : setting_.startup;
  h.last_step = r.step;
  return h;
}

std::optional<double> HangPolicy::next_check(double now) const {
  std::optional<double> earliest;
  for (const auto& r : ranks_) {
    for (const auto at : {deadline(r), quiet_at(r)}) {
      if (at && (!earliest || *at < *earliest)) earliest = *at;
    }
  }
  if (setting_.mode == Mode::kAuto && !any_beat_ && !said_missing_) {
    const double at = round_start_ + setting_.startup;
    if (!earliest || at < *earliest) earliest = at;
  }
  if (earliest) earliest = std::max(*earliest, now);
  return earliest;
}

std::optional<double> HangPolicy::quiet_at(const Rank& r) const {
  if (setting_.mode != Mode::kOff || quiet_after_ <= 0) return std::nullopt;
  if (!r.last_beat || r.said_quiet || r.paused_streams > 0 || r.ended) return std::nullopt;
  return *r.last_beat + r.paused_for + quiet_after_;
}

void HangPolicy::ended(int local_rank) {
  if (local_rank >= 0 && local_rank < static_cast<int>(ranks_.size())) ranks_[static_cast<size_t>(local_rank)].ended = true;
}

std::vector<QuietRank> HangPolicy::quiet(double now) {
  std::vector<QuietRank> out;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const auto at = quiet_at(ranks_[i]);
    if (!at || now < *at) continue;
    ranks_[i].said_quiet = true;
    out.push_back({static_cast<int>(i), silent_for(static_cast<int>(i), now), ranks_[i].step});
  }
  return out;
}

bool HangPolicy::missing_heartbeats(double now) {
  if (setting_.mode != Mode::kAuto || any_beat_ || said_missing_ || ranks_.empty()) return false;
  if (now < round_start_ + setting_.startup) return false;
  said_missing_ = true;
  return true;
}

double HangPolicy::silent_for(int local_rank, double now) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return 0;
  const Rank& r = ranks_[static_cast<size_t>(local_rank)];
  return now - r.last_beat.value_or(round_start_) - r.held(now);
}

std::optional<double> HangPolicy::last_beat(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return std::nullopt;
  return ranks_[static_cast<size_t>(local_rank)].last_beat;
}

std::optional<long long> HangPolicy::last_step(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks_.size())) return std::nullopt;
  return ranks_[static_cast<size_t>(local_rank)].step;
}

bool HangPolicy::output_held(int local_rank) const {
  return local_rank >= 0 && local_rank < static_cast<int>(ranks_.size()) &&
         ranks_[static_cast<size_t>(local_rank)].paused_streams > 0;
}

bool HangPolicy::ever_beat(int local_rank) const {
  return local_rank >= 0 && local_rank < static_cast<int>(ranks_.size()) &&
         ranks_[static_cast<size_t>(local_rank)].last_beat.has_value();
}

}  // namespace ddprun::launcher
