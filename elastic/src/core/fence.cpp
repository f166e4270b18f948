#include "core/fence.hpp"

#include <algorithm>

#include "core/event_loop.hpp"

namespace ddprun::elastic {

double fence_margin(double lifetime) { return std::max(0.2, lifetime / 5); }

std::chrono::steady_clock::time_point fence_deadline(std::chrono::steady_clock::time_point sent_at,
                                                     double lifetime) {
  return sent_at + seconds(lifetime - fence_margin(lifetime));
}

std::chrono::steady_clock::time_point backstop_deadline(std::chrono::steady_clock::time_point sent_at,
                                                        double lifetime) {
  return sent_at + seconds(lifetime - fence_margin(lifetime) / 2);
}

std::uint64_t HeartbeatLedger::send(TimePoint now) {
  if (unacknowledged_.size() == kMaxUnacknowledged) unacknowledged_.pop_front();
  unacknowledged_.emplace_back(next_, now);
  return next_++;
}

std::optional<HeartbeatLedger::TimePoint> HeartbeatLedger::acknowledged(std::uint64_t number) {
  if (number >= next_) return std::nullopt;  // never sent
  std::optional<TimePoint> sent;
  while (!unacknowledged_.empty() && unacknowledged_.front().first <= number) {
    if (unacknowledged_.front().first == number) sent = unacknowledged_.front().second;
    unacknowledged_.pop_front();
  }
  return sent;
}

}  // namespace ddprun::elastic
