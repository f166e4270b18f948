// When a worker counts as hung: the pure decision behind --hang_timeout, fed with heartbeat
// times and asked what is hung now. The watchdog (watchdog.hpp) turns file events into beats.
//
// Fixed (--hang_timeout=SECONDS): a rank is hung when its last beat is older than SECONDS.
//
// Auto (--hang_timeout=auto[:FLOOR]): learned from the beats. The first kWarmupIntervals intervals
// of each rank (start-up, compilation, warm caches) are not learned; after them the timeout is
// kAutoFactor times the largest interval seen on any rank, at least FLOOR seconds (default
// kAutoFloor), and it only grows. Before that nothing is judged.
//
// Before its first beat, a rank has the start-up allowance (--hang_startup) from the start of
// the round, whatever the mode. Under auto, a round in which no rank ever beats is not judged at
// all (missing_heartbeats() says so once, when the allowance has passed).
//
// A rank whose output ddprun holds back (one of its streams paused because the console or a log
// file is slower than the worker: output/output_writer.hpp) is not judged while it is held, and
// the time it was held does not count as silence: its clock stops. Nor does that time count in
// the intervals auto learns from.
#pragma once

#include <optional>
#include <vector>

#include "ddprun/launch_config.hpp"

namespace ddprun::launcher {

inline constexpr int kWarmupIntervals = 3;
inline constexpr double kAutoFactor = 5;
inline constexpr double kAutoFloor = 30;

struct HungRank {
  int local_rank = 0;
  double silent_for = 0;      // seconds since its last beat (or the round's start)
  bool ever_beat = false;
  double timeout = 0;         // the timeout it exceeded (the start-up allowance if it never beat)
};

class HangPolicy {
 public:
  explicit HangPolicy(config::HangTimeout setting);

  bool enabled() const { return setting_.enabled(); }

  // A new round of `ranks` local workers started at `now` (seconds on any steady clock).
  void start_round(int ranks, double now);

  // `local_rank` made progress at `now`. Returns the new timeout when auto learned a larger one.
  std::optional<double> beat(int local_rank, double now);

  // The ranks hung at `now`, longest silent first. Empty in the first round of a fixed policy
  // with no ranks, and whenever auto has nothing to judge by.
  std::vector<HungRank> hung(double now) const;

  // The earliest time at which hung() could say more than it says now (nullopt: never, until a
  // beat). For arming one timer instead of polling.
  std::optional<double> next_check(double now) const;

  // `local_rank`'s output stream stopped (true) or went on (false) being held back at `now`.
  void output_paused(int local_rank, bool paused, double now);

  // Auto only: true once, the first time it is asked after the start-up allowance passed with no
  // beat from any rank.
  bool missing_heartbeats(double now);

  // The timeout in force: fixed, or auto's learned one (0 while not learned yet).
  double timeout() const;
  // Seconds of silence that count: since `local_rank`'s last beat, or since the round's start if
  // it never beat, less the time its output was held back.
  double silent_for(int local_rank, double now) const;
  bool ever_beat(int local_rank) const;
  std::optional<double> last_beat(int local_rank) const;
  // True while a stream of `local_rank` is held back (output_paused()).
  bool output_held(int local_rank) const;

 private:
  struct Rank {
    std::optional<double> last_beat;
    int intervals = 0;
    int paused_streams = 0;   // its streams held back now
    double paused_at = 0;     // since when, if any
    double paused_for = 0;    // held back since the last beat (or the start), before paused_at
    double held(double now) const { return paused_for + (paused_streams > 0 ? now - paused_at : 0); }
  };
  double floor() const;
  // When `r` becomes hung, or nullopt when it cannot be judged now.
  std::optional<double> deadline(const Rank& r) const;

  config::HangTimeout setting_;
  double round_start_ = 0;
  std::vector<Rank> ranks_;
  double learned_ = 0;            // auto: 0 until kWarmupIntervals intervals of some rank
  bool any_beat_ = false;
  bool said_missing_ = false;
};

}  // namespace ddprun::launcher
