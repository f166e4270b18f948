#include <doctest/doctest.h>

#include "report/progress_samples.hpp"

using namespace ddprun::launcher;

TEST_CASE("the gap between a rank's progress records grows with the round's age") {
  struct Row {
    double age, gap;
  };
  for (const Row& r : {Row{0, 1}, Row{50, 1}, Row{100, 1}, Row{1000, 10}, Row{6000, 60}, Row{86400, 60}}) {
    CAPTURE(r.age);
    CHECK(progress_record_gap(r.age) == doctest::Approx(r.gap));
  }
}

TEST_CASE("a rank's first beat of a round is recorded, then one a gap, each rank alone") {
  ProgressSamples s;
  s.workers_started(100);
  auto first = s.beat(4, 0, 100.5, 7);
  REQUIRE(first);
  CHECK(first->event == "progress");
  CHECK(first->fields["rank"] == 4);
  CHECK(first->fields["local_rank"] == 0);
  CHECK(first->fields["step"] == 7);
  CHECK(first->fields["beats"] == 1);
  CHECK_FALSE(s.beat(4, 0, 100.9, 8));         // within 1 s
  REQUIRE(s.beat(5, 1, 100.9, std::nullopt));  // another rank's first
  CHECK(s.beat(5, 1, 100.9, std::nullopt) == std::nullopt);
  auto later = s.beat(4, 0, 101.6, 9);
  REQUIRE(later);
  CHECK(later->fields["beats"] == 3);  // every beat counted, recorded or not
  const auto none = s.beat(5, 1, 102, std::nullopt);
  REQUIRE(none);
  CHECK(none->fields["step"].is_null());
  // A new round: counts start again, the first beat is recorded at once.
  s.workers_started(200);
  auto again = s.beat(4, 0, 200.1, 0);
  REQUIRE(again);
  CHECK(again->fields["beats"] == 1);
}
