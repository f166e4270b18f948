// The two clocks, as seconds in a double: the wall clock for what a reader compares with other
// machines' times (event log, error files, failure timestamps), the monotonic clock for
// deadlines and intervals (pure state machines take `now` in it).
#pragma once

#include <chrono>

namespace ddprun {

// Seconds since the epoch.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Seconds on the monotonic clock (since an unspecified start; only differences mean anything).
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ddprun
