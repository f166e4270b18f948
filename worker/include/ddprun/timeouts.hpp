// How long the worker library waits for its peers before it gives up. Every blocking call in
// the library is bounded by one of these; none waits forever, and none uses c10d's
// 30-minute default.
#pragma once

#include <chrono>

#include "ddprun/export.hpp"
#include "ddprun/launch_env.hpp"

namespace ddprun {

// Environment variables overriding the defaults below, in seconds (fractions allowed).
inline constexpr const char* kStoreTimeoutEnv = "DDPRUN_STORE_TIMEOUT";
inline constexpr const char* kCollectiveTimeoutEnv = "DDPRUN_COLLECTIVE_TIMEOUT";

// Long enough for the slowest rank of a large job to start and reach the rendezvous.
inline constexpr std::chrono::milliseconds kDefaultStoreTimeout{std::chrono::seconds(300)};
// Long enough for a large bucket or a slow first step; short enough that a hung peer is
// reported within minutes rather than the half hour c10d waits by default.
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{std::chrono::seconds(300)};

struct DDPRUN_API Timeouts {
  // Connecting to the rendezvous store and waiting for the other ranks to join it.
  std::chrono::milliseconds store = kDefaultStoreTimeout;
  // One collective (all-reduce, broadcast, all-gather, barrier): a peer that neither takes
  // part nor dies within this time is reported as hung.
  std::chrono::milliseconds collective = kDefaultCollectiveTimeout;

  // The defaults, overridden by DDPRUN_STORE_TIMEOUT and DDPRUN_COLLECTIVE_TIMEOUT when set.
  // Throws LaunchEnvError naming a malformed variable.
  static Timeouts from_env(const EnvLookup& env = process_env());
};

}  // namespace ddprun
