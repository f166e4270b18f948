// Cost of one ddprun::heartbeat() (heartbeat.hpp): --calls calls, timed; prints
// "heartbeat calls=<n> ns_per_call=<t> file=<set|unset>". Under ddprun the file is set and
// watched by ddprun's inotify (the real cost); without it heartbeat() is a no-op. For
// scripts/bench/hangs.py; not a test.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddprun/heartbeat.hpp"

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 100000;
  if (calls <= 0) {
    std::fprintf(stderr, "usage: bench_heartbeat [CALLS > 0]\n");
    return 64;
  }
  ddprun::heartbeat();  // the first call reads the environment
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) ddprun::heartbeat();
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("heartbeat calls=%ld ns_per_call=%.1f file=%s\n", calls, ns / static_cast<double>(calls),
              std::getenv("DDPRUN_HEARTBEAT_FILE") ? "set" : "unset");
  return 0;
}
