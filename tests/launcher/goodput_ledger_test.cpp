#include <doctest/doctest.h>

#include "report/goodput_ledger.hpp"

#include <string>

using namespace ddprun::launcher;

// Times are absolute on the caller's clock: ddprun starts at 100.
constexpr double T0 = 100;

TEST_CASE("a job without failures: time to start, then training to the end") {
  GoodputLedger l(T0, true);
  l.workers_started(T0 + 1, 2);
  CHECK_FALSE(l.progress(T0 + 3, 0));
  CHECK_FALSE(l.progress(T0 + 3.5, 0));  // the same rank again
  CHECK(std::string(l.progress(T0 + 4, 1)) == "started");  // the last rank: training starts
  CHECK_FALSE(l.progress(T0 + 5, 1));
  l.stopped(T0 + 99);  // the workers succeeded
  const auto g = l.figures(T0 + 100);
  CHECK(g.wall == doctest::Approx(100));
  REQUIRE(g.time_to_start);
  CHECK(*g.time_to_start == doctest::Approx(4));
  CHECK(g.starting == doctest::Approx(4));
  CHECK(g.training == doctest::Approx(95));
  CHECK(g.idle == doctest::Approx(1));
  CHECK(g.recovering == 0);
  REQUIRE(g.ett);
  CHECK(*g.ett == doctest::Approx(95));
  CHECK_FALSE(g.ett_upper_bound);
  CHECK(goodput_text(g) == "goodput 95.0%: started in 4.0 s, no failures, 1.0 s idle");
}

TEST_CASE("no rank ever made progress: nothing to judge, and the line says why") {
  GoodputLedger l(T0, true);
  l.workers_started(T0 + 1, 2);
  l.progress(T0 + 2, 0);
  const auto g = l.figures(T0 + 10);
  CHECK_FALSE(g.time_to_start);
  CHECK_FALSE(g.ett);
  CHECK(g.starting == doctest::Approx(10));
  CHECK(goodput_text(g).rfind("goodput unknown: no rank made progress", 0) == 0);
  CHECK(goodput_json(g)["ett_percent"].is_null());
}

// The example: failures of several kinds, with commits to the snapshot folder.
TEST_CASE("failures: time to recover each, work redone back to the last commit, ETT% = 100 - idleness - failure") {
  GoodputLedger l(T0, true);
  l.workers_started(T0 + 1, 1);
  l.progress(T0 + 4, 0);  // started in 4 s; training from 4
  l.committed(T0 + 10);
  l.failure(T0 + 16, "host_oom");       // 6 s since the commit
  l.failure(T0 + 16.1, "consequence");  // the same stop: not counted
  l.workers_started(T0 + 17, 1);
  CHECK(std::string(l.progress(T0 + 18, 0)) == "recovered");  // in 2 s
  l.failure(T0 + 20, "hang");
  l.committed(T0 + 20.5);  // a dying gasp's save after the failure: nothing is redone
  l.workers_started(T0 + 21, 1);
  l.progress(T0 + 22, 0);
  l.failure(T0 + 30, kAnotherNode);  // the last commit (20.5) is before this stretch (22): all 8 s redone
  l.workers_started(T0 + 31, 1);
  l.progress(T0 + 31.5, 0);
  l.stopped(T0 + 41);
  const auto g = l.figures(T0 + 41);
  REQUIRE(g.failures.size() == 3);
  CHECK(g.failures[0].at == doctest::Approx(16));
  CHECK(*g.failures[0].recovered_in == doctest::Approx(2));
  CHECK(*g.failures[0].waited == doctest::Approx(1));
  CHECK(*g.failures[0].redone == doctest::Approx(6));
  CHECK(*g.failures[1].recovered_in == doctest::Approx(2));
  CHECK(*g.failures[1].redone == doctest::Approx(0));
  CHECK(*g.failures[2].recovered_in == doctest::Approx(1.5));
  CHECK(*g.failures[2].redone == doctest::Approx(8));
  CHECK(g.failures_by_kind.at("host_oom") == 1);
  CHECK(g.failures_by_kind.at("hang") == 1);
  CHECK(g.failures_by_kind.at(kAnotherNode) == 1);
  CHECK(g.failures_by_kind.count("consequence") == 0);
  CHECK(g.starting == doctest::Approx(4));
  CHECK(g.recovering == doctest::Approx(5.5));
  CHECK(g.training == doctest::Approx(12 + 2 + 8 + 9.5));
  CHECK(g.idle == 0);
  CHECK(g.starting + g.training + g.recovering + g.idle == doctest::Approx(g.wall));
  CHECK(g.redone == doctest::Approx(14));
  CHECK(*g.ett == doctest::Approx(100.0 * (31.5 - 14) / 41));
  // ETT% = 100% - idleness% - failure%: idleness = start + idle, failure = recovering + redone.
  CHECK(*g.ett == doctest::Approx(100.0 - 100.0 * (g.starting + g.idle) / g.wall - 100.0 * (g.recovering + g.redone) / g.wall));
  CHECK(goodput_text(g) == "goodput 42.7%: started in 4.0 s, 3 failures (1 on another node, 1 hang, 1 host_oom) "
                           "cost 5.5 s, 14.0 s of work redone");
  const auto j = goodput_json(g);
  CHECK(j["failures"][2]["kind"] == "another_node");
  CHECK(j["failures"][0]["time_to_recover"].get<double>() == doctest::Approx(2));
  CHECK(j["work_redone_seconds"].get<double>() == doctest::Approx(14));
}

TEST_CASE("without a snapshot folder, or before any commit, work redone is unknown and ETT% an upper bound") {
  for (const bool snapshots : {false, true}) {
    CAPTURE(snapshots);
    GoodputLedger l(T0, snapshots);
    l.workers_started(T0, 1);
    l.progress(T0 + 1, 0);
    l.failure(T0 + 11, "segfault");
    l.workers_started(T0 + 12, 1);
    l.progress(T0 + 13, 0);
    const auto g = l.figures(T0 + 20);
    CHECK_FALSE(g.failures[0].redone);
    CHECK(g.redone_unknown == 1);
    CHECK(g.ett_upper_bound);
    CHECK(*g.ett == doctest::Approx(100.0 * 17 / 20));
    CHECK(goodput_text(g) == "goodput at most 85.0%: started in 1.0 s, 1 failure (1 segfault) cost 2.0 s, "
                             "work redone unknown (no checkpoint committed to DDPRUN_SNAPSHOT_DIR)");
    CHECK(goodput_json(g)["work_redone_seconds"].is_null());
    CHECK(goodput_json(g)["failures"][0]["work_redone"].is_null());
  }
}

TEST_CASE("a failure before every rank made progress is part of the time to start, and redoes nothing") {
  GoodputLedger l(T0, false);
  l.workers_started(T0 + 1, 2);
  l.progress(T0 + 2, 0);
  l.failure(T0 + 3, "import_error");
  l.workers_started(T0 + 5, 2);
  CHECK_FALSE(l.progress(T0 + 6, 1));  // a new round: rank 0's beat of the last round does not count
  CHECK(l.progress(T0 + 7, 0));
  const auto g = l.figures(T0 + 10);
  CHECK(*g.time_to_start == doctest::Approx(7));
  CHECK(g.starting == doctest::Approx(7));
  CHECK(g.recovering == 0);
  CHECK(*g.failures[0].recovered_in == doctest::Approx(4));
  CHECK(*g.failures[0].redone == 0);
  CHECK_FALSE(g.ett_upper_bound);
  CHECK(*g.ett == doctest::Approx(30));
}

TEST_CASE("a stop that is no failure is idle until every rank made progress again; a failure meanwhile recovers") {
  GoodputLedger l(T0, true);
  l.workers_started(T0, 1);
  l.progress(T0 + 1, 0);
  l.stopped(T0 + 5);  // a node joined: a new round
  CHECK_FALSE(l.progress(T0 + 5.5, 0));  // no workers of a round run: a late beat is no progress
  l.workers_started(T0 + 6, 1);
  CHECK(std::string(l.progress(T0 + 7, 0)) == "resumed");
  l.stopped(T0 + 8);
  l.failure(T0 + 9, "segfault");  // during the idle wait
  l.workers_started(T0 + 10, 1);
  l.progress(T0 + 12, 0);
  const auto g = l.figures(T0 + 12);
  CHECK(g.idle == doctest::Approx(2 + 1));
  CHECK(g.recovering == doctest::Approx(3));
  CHECK(g.training == doctest::Approx(4 + 1));
  CHECK(*g.failures[0].redone == 0);  // no training was cut short by it
  CHECK(*g.failures[0].recovered_in == doctest::Approx(3));
}

TEST_CASE("a failure that ends the job: recovering to the end, not recovered, nothing redone") {
  GoodputLedger l(T0, true);
  l.workers_started(T0, 1);
  l.progress(T0 + 1, 0);
  l.committed(T0 + 2);
  l.failure(T0 + 4, "user_error");
  l.stopped(T0 + 4.5);  // the job's end
  const auto g = l.figures(T0 + 5);
  CHECK(g.recovering == doctest::Approx(1));
  CHECK_FALSE(g.failures[0].recovered_in);
  CHECK(g.redone == 0);
  CHECK(g.redone_unknown == 0);
  const auto j = goodput_json(g);
  CHECK(j["failures"][0]["time_to_recover"].is_null());
  CHECK(j["failures"][0]["work_redone"] == 0.0);
  CHECK(*g.ett == doctest::Approx(60));
}

TEST_CASE("a failure --chaos injected is counted as injected, by its kind too, and the summary says so") {
  GoodputLedger l(T0, true);
  l.workers_started(T0 + 1, 1);
  l.progress(T0 + 2, 0);
  l.committed(T0 + 3);
  l.failure(T0 + 4, "killed", true);
  l.workers_started(T0 + 5, 1);
  l.progress(T0 + 6, 0);
  l.failure(T0 + 7, "hang");  // a real one
  l.workers_started(T0 + 8, 1);
  l.progress(T0 + 9, 0);
  l.stopped(T0 + 10);
  const auto g = l.figures(T0 + 10);
  CHECK(g.injected == 1);
  CHECK(g.failures_by_kind.at("killed") == 1);
  REQUIRE(g.failures.size() == 2);
  CHECK(g.failures[0].injected);
  CHECK_FALSE(g.failures[1].injected);
  const auto j = goodput_json(g);
  CHECK(j["failures_injected"] == 1);
  CHECK(j["failures"][0]["injected"] == true);
  CHECK(j["failures"][1]["injected"] == false);
  CHECK(goodput_text(g).find("2 failures (1 hang, 1 killed; 1 injected by --chaos) cost 4.0 s") != std::string::npos);
}
