// Small pieces shared by the code that runs on the launcher's asio::io_context.
#pragma once

#include <asio/steady_timer.hpp>
#include <chrono>
#include <memory>

#include "ddprun/clocks.hpp"  // monotonic_seconds(): the JobCoordinator's `now`

namespace ddprun::elastic {

// Saturates instead of overflowing: the configuration bounds every timeout (kMaxTimeoutSeconds), and
// a timer of more than the clock can count must wait long, never fire at once.
inline std::chrono::steady_clock::duration seconds(double s) {
  using Clock = std::chrono::steady_clock;
  constexpr double kMax = std::chrono::duration<double>(Clock::duration::max()).count() / 2;
  if (!(s > 0)) return Clock::duration::zero();
  if (s >= kMax) return Clock::duration::max() / 2;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The time point of `s`, seconds on the clock of monotonic_seconds().
inline std::chrono::steady_clock::time_point monotonic_time_point(double s) {
  return std::chrono::steady_clock::time_point(seconds(s));
}

// Lets a handler queued on the io_context find out whether the object that queued it still
// exists: the launcher may destroy a rendezvous while some of its handlers are queued.
class Lifetime {
 public:
  std::weak_ptr<void> token() const { return token_; }

 private:
  std::shared_ptr<void> token_ = std::make_shared<char>();
};

}  // namespace ddprun::elastic
