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
// Off (the default): nothing is judged, but a rank that made progress and then stays silent for
// quiet_after seconds (kQuietWarning, 600) is reported by quiet(), once, until it makes progress
// again: ddprun warns and does nothing else. A rank that never made progress is not reported.
//
// A beat may carry the rank's step (a --progress_pattern's step group); the last one is kept for
// the hang message, the quiet warning and /status.
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
// Without --hang_timeout: seconds of silence, after progress, before ddprun warns once.
inline constexpr double kQuietWarning = 600;

struct HungRank {
  int local_rank = 0;
  double silent_for = 0;      // seconds since its last beat (or the round's start)
  bool ever_beat = false;
  double timeout = 0;         // the timeout it exceeded (the start-up allowance if it never beat)
  std::optional<long long> last_step;  // the step of its last beat that had one
};

// A rank silent for quiet_after seconds after making progress, with no --hang_timeout.
struct QuietRank {
  int local_rank = 0;
  double silent_for = 0;
  std::optional<long long> last_step;
};

class HangPolicy {
 public:
  // `quiet_after`: seconds before quiet() reports a silent rank when the setting is off; 0: never.
  explicit HangPolicy(config::HangTimeout setting, double quiet_after = kQuietWarning);

  bool enabled() const { return setting_.enabled(); }
  // Whether quiet() can report anything: the setting is off and quiet_after is above 0.
  bool warns_quiet() const { return setting_.mode == config::HangTimeout::Mode::kOff && quiet_after_ > 0; }

  // A new round of `ranks` local workers started at `now` (seconds on any steady clock).
  void start_round(int ranks, double now);

  // `local_rank` made progress at `now`, at `step` if known. Returns the new timeout when auto
  // learned a larger one.
  std::optional<double> beat(int local_rank, double now, std::optional<long long> step = std::nullopt);

  // `local_rank` is at `step`, as its progress record says between beats (read at a hang): its
  // last step from now on. Not a beat: its clock does not move.
  void step_recorded(int local_rank, long long step);

  // The ranks hung at `now`, longest silent first. Empty in the first round of a fixed policy
  // with no ranks, and whenever auto has nothing to judge by.
  std::vector<HungRank> hung(double now) const;

  // Where `local_rank` stands at `now`, as hung() would report it (whether or not it is hung):
  // for a rank that others wait for (culprit.hpp) while it is not silent long enough itself.
  HungRank standing(int local_rank, double now) const;

  // Off only: the ranks that made progress and have been silent quiet_after seconds (not counting
  // time held back) at `now`, each reported once until its next beat.
  std::vector<QuietRank> quiet(double now);

  // The earliest time at which hung() or quiet() could say more than they say now (nullopt:
  // never, until a beat). For arming one timer instead of polling.
  std::optional<double> next_check(double now) const;

  // `local_rank`'s output stream stopped (true) or went on (false) being held back at `now`.
  void output_paused(int local_rank, bool paused, double now);

  // `local_rank`'s worker ended: its silence is no hang, it is not judged or warned of again
  // this round (a rank that finished early must not hide one that hangs later).
  void ended(int local_rank);

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
  std::optional<long long> last_step(int local_rank) const;
  // True while a stream of `local_rank` is held back (output_paused()).
  bool output_held(int local_rank) const;

 private:
  struct Rank {
    std::optional<double> last_beat;
    int intervals = 0;
    int paused_streams = 0;   // its streams held back now
    double paused_at = 0;     // since when, if any
    double paused_for = 0;    // held back since the last beat (or the start), before paused_at
    std::optional<long long> step;
    bool said_quiet = false;  // quiet() reported its current silence
    bool ended = false;       // its worker ended: never judged again this round
    double held(double now) const { return paused_for + (paused_streams > 0 ? now - paused_at : 0); }
  };
  double floor() const;
  // When `r` becomes hung, or nullopt when it cannot be judged now.
  std::optional<double> deadline(const Rank& r) const;
  // When quiet() reports `r`, or nullopt when it will not (until a beat).
  std::optional<double> quiet_at(const Rank& r) const;

  config::HangTimeout setting_;
  double quiet_after_;
  double round_start_ = 0;
  std::vector<Rank> ranks_;
  double learned_ = 0;            // auto: 0 until kWarmupIntervals intervals of some rank
  bool any_beat_ = false;
  bool said_missing_ = false;
};

}  // namespace ddprun::launcher
