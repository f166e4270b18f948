// The hang policy as tables of beats and times: off, fixed (--hang_timeout=SECONDS,
// --hang_startup) and auto (learned from the beats).
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "hangs/hang_policy.hpp"

using namespace ddprun::launcher;
using ddprun::config::HangTimeout;

namespace {

HangTimeout fixed(double seconds, double startup) { return {HangTimeout::Mode::kFixed, seconds, startup}; }
HangTimeout automatic(double floor, double startup) { return {HangTimeout::Mode::kAuto, floor, startup}; }

std::vector<int> hung_ranks(const HangPolicy& p, double now) {
  std::vector<int> out;
  for (const auto& h : p.hung(now)) out.push_back(h.local_rank);
  return out;
}

}  // namespace

TEST_CASE("off: nothing is ever hung") {
  HangPolicy p(HangTimeout{});
  p.start_round(2, 0);
  CHECK(hung_ranks(p, 1e6).empty());
  CHECK_FALSE(p.next_check(0).has_value());
}

TEST_CASE("fixed: silent longer than the timeout since the last beat, or than --hang_startup since the start") {
  HangPolicy p(fixed(5, 5));
  p.start_round(3, 100);
  CHECK(p.next_check(100) == 105);
  p.beat(0, 101);
  p.beat(1, 103);
  CHECK(hung_ranks(p, 104.9).empty());
  CHECK(hung_ranks(p, 105) == std::vector<int>{2});          // never beat: judged from the start
  CHECK(hung_ranks(p, 106.5) == std::vector<int>{2, 0});     // longest silent first
  CHECK(hung_ranks(p, 108) == std::vector<int>{2, 0, 1});
  const auto h = p.hung(106.5);
  CHECK(h[1].silent_for == doctest::Approx(5.5));
  CHECK(h[1].timeout == 5);
  CHECK(h[1].ever_beat);
  CHECK_FALSE(h[0].ever_beat);
  p.start_round(3, 200);  // a new round forgets the beats
  CHECK(hung_ranks(p, 204).empty());
}

TEST_CASE("fixed: the start-up allowance is separate from the timeout") {
  HangPolicy p(fixed(2, 60));
  p.start_round(2, 0);
  p.beat(0, 30);  // a slow start is not a hang
  CHECK(hung_ranks(p, 31).empty());
  CHECK(hung_ranks(p, 32) == std::vector<int>{0});
  CHECK(hung_ranks(p, 59.9) == std::vector<int>{0});
  const auto h = p.hung(60);
  REQUIRE(h.size() == 2);
  CHECK(h[0].local_rank == 1);
  CHECK(h[0].timeout == 60);
}

TEST_CASE("auto: learns 5x the largest interval after the warm-up, with a floor") {
  HangPolicy p(automatic(2, 10));
  p.start_round(2, 0);
  double t = 0;
  // Warm-up: a slow first interval is not learned.
  std::optional<double> learned;
  for (double interval : {0.5, 3.0, 0.1, 0.1}) {
    t += interval;
    learned = p.beat(0, t);
    CHECK_FALSE(learned.has_value());
  }
  CHECK(p.timeout() == 0);
  CHECK(hung_ranks(p, t + 100) == std::vector<int>{1});  // rank 1 never beat: past --hang_startup
  t += 0.2;
  learned = p.beat(0, t);  // the first learned interval: 5 x 0.2 = 1 s, below the floor
  REQUIRE(learned.has_value());
  CHECK(*learned == doctest::Approx(2.0));
  t += 0.6;
  learned = p.beat(0, t);  // 5 x 0.6 = 3 s
  REQUIRE(learned.has_value());
  CHECK(*learned == doctest::Approx(3.0));
  CHECK_FALSE(p.beat(0, t + 0.1).has_value());  // shorter: the timeout does not shrink
  CHECK(p.timeout() == doctest::Approx(3.0));
  t += 0.1;
  const auto before = hung_ranks(p, t + 2.9);
  CHECK(std::find(before.begin(), before.end(), 0) == before.end());
  const auto at = hung_ranks(p, t + 3.0);
  CHECK(std::find(at.begin(), at.end(), 0) != at.end());
}

TEST_CASE("auto: a rank that never beats while another does is hung after --hang_startup") {
  HangPolicy p(automatic(1, 10));
  p.start_round(2, 0);
  p.beat(0, 2.0);
  CHECK(p.next_check(2.0) == doctest::Approx(10.0));
  CHECK(hung_ranks(p, 9.9).empty());
  const auto h = p.hung(10.0);
  REQUIRE(h.size() == 1);
  CHECK(h[0].local_rank == 1);
  CHECK_FALSE(h[0].ever_beat);
  CHECK(h[0].timeout == doctest::Approx(10.0));
}

TEST_CASE("auto: a program that never beats is not judged, and that is said once") {
  HangPolicy p(automatic(1, 4));
  p.start_round(2, 0);
  CHECK_FALSE(p.missing_heartbeats(3.9));
  CHECK(p.next_check(0) == doctest::Approx(4.0));
  CHECK(p.missing_heartbeats(4.0));
  CHECK_FALSE(p.missing_heartbeats(5.0));
  CHECK(hung_ranks(p, 1e6).empty());
  CHECK_FALSE(p.next_check(5).has_value());
}

TEST_CASE("a rank whose output ddprun holds back is not judged, and the time held does not count") {
  HangPolicy p(fixed(5, 20));
  p.start_round(3, 0);
  p.beat(0, 1);
  p.beat(1, 1);
  // Rank 0 blocks writing to a slow console at 2: both its streams are paused, at 2 and 3.
  p.output_paused(0, true, 2);
  p.output_paused(0, true, 3);
  CHECK(p.output_held(0));
  CHECK(hung_ranks(p, 50) == std::vector<int>{2, 1});  // rank 0, silent as long as rank 1, is not
  CHECK(p.next_check(6) == doctest::Approx(6));          // rank 1's deadline; none for rank 0
  // One stream reads again at 10: still held. The other at 12: its clock goes on from where it
  // stopped (1 s of silence counted before the pause), so it is hung at 16, not at 6.
  const auto at = [&](double now) {
    const auto ranks = hung_ranks(p, now);
    return std::find(ranks.begin(), ranks.end(), 0) != ranks.end();
  };
  p.output_paused(0, false, 10);
  CHECK(p.output_held(0));
  CHECK_FALSE(at(11));
  p.output_paused(0, false, 12);
  CHECK_FALSE(p.output_held(0));
  CHECK(p.silent_for(0, 14) == doctest::Approx(3));
  CHECK(p.last_beat(0) == 1);
  CHECK_FALSE(at(15.9));
  CHECK(at(16));
  // A beat starts the count again from nothing held.
  p.beat(0, 20);
  CHECK(p.silent_for(0, 22) == doctest::Approx(2));
  CHECK_FALSE(at(24.9));
  CHECK(at(25));
  // A rank that never beat has its start-up allowance moved the same way.
  p.output_paused(2, true, 5);
  p.output_paused(2, false, 15);
  CHECK(hung_ranks(p, 29.9) == std::vector<int>{1, 0});
  CHECK(hung_ranks(p, 30) == std::vector<int>{1, 2, 0});  // longest silent (counted) first
}

TEST_CASE("auto: the time a rank was held back is not learned as an interval") {
  HangPolicy p(automatic(1, 10));
  p.start_round(1, 0);
  for (double t : {1.0, 2.0, 3.0, 4.0}) p.beat(0, t);  // warm-up
  const auto learned = p.beat(0, 5);
  REQUIRE(learned.has_value());
  CHECK(*learned == doctest::Approx(5.0));
  // Held 60 s between two beats 61 s apart: 1 s is learned, not 61.
  p.output_paused(0, true, 5.5);
  p.output_paused(0, false, 65.5);
  CHECK_FALSE(p.beat(0, 66).has_value());
  CHECK(p.timeout() == doctest::Approx(5.0));
}

namespace {

std::vector<int> quiet_ranks(HangPolicy& p, double now) {
  std::vector<int> out;
  for (const auto& q : p.quiet(now)) out.push_back(q.local_rank);
  return out;
}

}  // namespace

TEST_CASE("off: a rank silent for quiet_after seconds after progress is reported once, until it beats again") {
  // Rank 0 beats at 10 and 20 (step 7), rank 1 at 5 and then at 130, rank 2 never beats,
  // rank 3 beats at 10 and is held back from 50 to 100.
  HangPolicy p(HangTimeout{}, 100);
  p.start_round(4, 0);
  CHECK_FALSE(p.next_check(0).has_value());  // nothing has beat: nothing to warn about
  p.beat(0, 10);
  p.beat(0, 20, 7);
  p.beat(1, 5);
  p.beat(3, 10);
  p.output_paused(3, true, 50);
  CHECK(p.next_check(20) == 105);  // rank 1's; rank 3, held, has none
  struct Row {
    double now;
    std::vector<int> quiet;
  };
  const std::vector<Row> table = {
      {100, {}},       // rank 3 is let go at 100 (below)
      {104.9, {}},
      {105, {1}},
      {119.9, {}},     // rank 1 was said already
      {120, {0}},
      {130, {}},       // rank 1 beats at 130 (below): its next warning is at 230
      {159.9, {}},
      {160, {3}},      // 10 + 100 + the 50 s it was held back
      {229.9, {}},
      {230, {1}},
      {1e6, {}},       // each said once; rank 2 never beat: never
  };
  for (const auto& row : table) {
    CAPTURE(row.now);
    if (row.now == 130) p.beat(1, 130);
    if (row.now == 100) p.output_paused(3, false, 100);
    CHECK(quiet_ranks(p, row.now) == row.quiet);
  }
  CHECK(hung_ranks(p, 1e6).empty());  // and nothing is ever hung
}

TEST_CASE("off: the quiet report carries the silence and the last step") {
  HangPolicy p(HangTimeout{}, 600);
  p.start_round(2, 0);
  p.beat(0, 1, 41);
  p.beat(0, 2);  // a beat without a step keeps the last step
  p.beat(1, 3);
  CHECK(p.last_step(0) == 41);
  CHECK_FALSE(p.last_step(1).has_value());
  CHECK(p.next_check(3) == 602);
  const auto q = p.quiet(700);
  REQUIRE(q.size() == 2);
  CHECK(q[0].local_rank == 0);
  CHECK(q[0].silent_for == doctest::Approx(698));
  CHECK(q[0].last_step == 41);
  CHECK_FALSE(q[1].last_step.has_value());
  CHECK_FALSE(p.next_check(700).has_value());
}

TEST_CASE("the quiet warning is for --hang_timeout=off only, and quiet_after=0 turns it off") {
  for (const auto& setting : {fixed(1000, 1000), automatic(1000, 1000)}) {
    HangPolicy p(setting, 100);
    p.start_round(1, 0);
    p.beat(0, 1, 3);
    CHECK(p.quiet(500).empty());
  }
  HangPolicy never(HangTimeout{}, 0);
  never.start_round(1, 0);
  never.beat(0, 1);
  CHECK(never.quiet(1e9).empty());
  CHECK_FALSE(never.next_check(2).has_value());
}

TEST_CASE("a hung rank carries its last step") {
  HangPolicy p(fixed(5, 5));
  p.start_round(1, 0);
  p.beat(0, 1, 12);
  const auto h = p.hung(10);
  REQUIRE(h.size() == 1);
  CHECK(h[0].last_step == 12);
}

TEST_CASE("a step read from the progress record is the rank's last step, and not a beat") {
  HangPolicy p(fixed(5, 5));
  p.start_round(2, 0);
  p.beat(0, 1, 12);
  p.step_recorded(0, 13);  // the record is past the last beat's step (beats are throttled)
  p.step_recorded(1, 4);   // a rank that never beat
  p.step_recorded(7, 1);   // no such rank: ignored
  CHECK(p.last_step(0) == 13);
  CHECK(p.last_step(1) == 4);
  CHECK_FALSE(p.ever_beat(1));
  const auto h = p.hung(10);  // rank 1: --hang_startup since the start; rank 0 since its beat at 1
  REQUIRE(h.size() == 2);
  CHECK(h[0].local_rank == 1);
  CHECK(h[0].silent_for == doctest::Approx(10));
  CHECK(h[1].last_step == 13);
  CHECK(h[1].silent_for == doctest::Approx(9));
}

TEST_CASE("a rank whose worker ended is not judged: one that finished early hides no later hang") {
  HangPolicy p(fixed(3, 5));
  p.start_round(2, 0);
  p.beat(0, 1);
  p.beat(1, 1);
  p.ended(0);  // rank 0 is done at 1.5; rank 1 goes on, then stops
  p.beat(1, 2);
  CHECK(hung_ranks(p, 4.9).empty());
  CHECK(p.next_check(4.9) == 5);                     // rank 1's deadline, not rank 0's (4)
  CHECK(hung_ranks(p, 5) == std::vector<int>{1});
  CHECK(hung_ranks(p, 100) == std::vector<int>{1});  // rank 0 never
  p.ended(1);
  CHECK(hung_ranks(p, 100).empty());
  CHECK_FALSE(p.next_check(100).has_value());
  p.ended(7);  // no such rank: nothing happens
  p.start_round(2, 200);  // a new round judges both again
  CHECK(hung_ranks(p, 205) == std::vector<int>{0, 1});
}

TEST_CASE("off: a rank whose worker ended is not reported quiet") {
  HangPolicy p(HangTimeout{}, 10);
  p.start_round(2, 0);
  p.beat(0, 1);
  p.beat(1, 1);
  p.ended(0);
  const auto quiet = p.quiet(20);
  REQUIRE(quiet.size() == 1);
  CHECK(quiet[0].local_rank == 1);
}
