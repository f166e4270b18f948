// The clocks: as seconds in a double, the wall clock for what a reader compares with other
// machines' times (event log, error files, failure timestamps) and the monotonic clock for
// deadlines and intervals (pure state machines take `now` in it); and CLOCK_MONOTONIC as
// nanoseconds in an int64, the form of a deadline that crosses a process boundary or that a child
// reads before its exec (the orphan guard's fence, a worker's StartRequest::start_by, the zygote's
// START_BY, read there with Python's time.monotonic_ns()). steady_clock is CLOCK_MONOTONIC on
// Linux (libstdc++ and libc++), so the two monotonic forms compare.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "ddprun/child_stack.hpp"

namespace ddprun {

// Seconds since the epoch.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Seconds on the monotonic clock (since an unspecified start; only differences mean anything).
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Now, in nanoseconds of CLOCK_MONOTONIC. Async-signal-safe: a child of clone_vfork calls it
// before its exec.
DDPRUN_CHILD_STACK inline std::int64_t monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// `deadline` on monotonic_ns()'s scale; 0 for none, so a deadline at 0 ns (never a real one) is 1.
inline std::int64_t deadline_ns(const std::optional<std::chrono::steady_clock::time_point>& deadline) {
  static_assert(std::is_same_v<std::chrono::steady_clock::duration, std::chrono::nanoseconds>);
  return deadline ? std::max<std::int64_t>(1, deadline->time_since_epoch().count()) : 0;
}

}  // namespace ddprun
