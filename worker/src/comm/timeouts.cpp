#include "ddprun/timeouts.hpp"

#include <cmath>

namespace ddprun {

namespace {

std::chrono::milliseconds from_seconds(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::llround(seconds * 1000.0)));
}

}  // namespace

Timeouts Timeouts::from_env(const EnvLookup& env) {
  Timeouts t;
  if (auto v = env(kStoreTimeoutEnv)) t.store = from_seconds(parse_seconds(kStoreTimeoutEnv, *v));
  if (auto v = env(kCollectiveTimeoutEnv)) {
    t.collective = from_seconds(parse_seconds(kCollectiveTimeoutEnv, *v));
  }
  return t;
}

}  // namespace ddprun
