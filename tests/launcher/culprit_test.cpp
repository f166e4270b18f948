// Which rank a hang is about, from the ranks' progress records: a table of records -> the
// culprits and what the user is told.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "hangs/culprit.hpp"

using namespace ddprun::launcher;

namespace {
RankCollectives in(int rank, long long coll, std::string op = "all_reduce") { return {rank, coll, true, op}; }
RankCollectives out(int rank, long long coll, std::string op = "all_reduce") { return {rank, coll, false, op}; }
RankCollectives none(int rank) { return {rank, std::nullopt, false, ""}; }
bool same(const RankCollectives& a, const RankCollectives& b) {
  return a.rank == b.rank && a.coll == b.coll && a.in == b.in && a.op == b.op;
}
}  // namespace

TEST_CASE("the culprits: the ranks that have not entered the collective the others wait in") {
  struct Row {
    const char* what;
    std::vector<RankCollectives> ranks;
    bool decided;
    std::vector<int> culprits;
    std::string why;
  };
  const std::vector<Row> table = {
      {"the issue's case: rank 1 sleeps before the all_reduce rank 0 waits in",
       {in(0, 12), out(1, 11)}, true, {1},
       "rank 0 waits in all_reduce #12; rank 1 has not entered it: last in all_reduce #11"},
      {"rank 1 has entered no collective at all (its record has none yet)",
       {in(0, 1), none(1)}, true, {1},
       "rank 0 waits in all_reduce #1; rank 1 has not entered it: no collective entered yet"},
      {"a record that counts 0 collectives",
       {out(1, 0, ""), in(0, 1, "barrier")}, true, {1},
       "rank 0 waits in barrier #1; rank 1 has not entered it: no collective entered yet"},
      {"several waiters, several culprits, one still in an earlier collective",
       {in(0, 7, "broadcast"), out(1, 6), in(2, 7, "broadcast"), in(3, 5, "barrier")}, true, {1, 3},
       "ranks 0, 2 wait in broadcast #7; ranks 1, 3 have not entered it: rank 1 last in all_reduce #6, "
       "rank 3 still in barrier #5"},
      {"every rank here waits in it: the one they wait for is on another node",
       {in(0, 4), in(1, 4)}, true, {},
       "ranks 0, 1 wait in all_reduce #4; every rank on this node entered it (the rank they wait for is on "
       "another node, or the collective itself is stuck)"},
      {"every rank here in the same DDP backward pass: one may be stuck in its own, before its all-reduce",
       {in(0, 30, "ddp_backward"), in(1, 30, "ddp_backward")}, true, {},
       "ranks 0, 1 wait in ddp_backward #30; every rank on this node entered it (the rank they wait for is on "
       "another node, or stuck in its own backward pass before its all-reduce: see the stacks)"},
      {"rank 1 stopped before its backward pass: rank 0 waits in it",
       {in(0, 31, "ddp_backward"), out(1, 30, "ddp_backward")}, true, {1},
       "rank 0 waits in ddp_backward #31; rank 1 has not entered it: last in ddp_backward #30"},
      {"nobody waits in a collective: no decision", {out(0, 3), out(1, 2)}, false, {}, ""},
      {"no records at all (a program without ddprun's module): no decision", {none(0), none(1)}, false, {}, ""},
      {"no ranks", {}, false, {}, ""},
      {"the op unknown", {in(0, 2, ""), out(1, 1, "")}, true, {1},
       "rank 0 waits in collective #2; rank 1 has not entered it: last in collective #1"},
  };
  for (const auto& row : table) {
    CAPTURE(row.what);
    const auto c = find_culprits(row.ranks);
    REQUIRE(c.has_value() == row.decided);
    if (!c) continue;
    CHECK(c->ranks == row.culprits);
    CHECK(c->why == row.why);
  }
}

TEST_CASE("a progress record's collectives") {
  CHECK(same(rank_collectives(3, {5, 9, true, "ddp_backward"}), in(3, 9, "ddp_backward")));
  CHECK(same(rank_collectives(1, {std::nullopt, 2, false, "barrier"}), out(1, 2, "barrier")));
  CHECK(same(rank_collectives(0, {}), none(0)));  // an empty record: no collective, not inside one
}

TEST_CASE("the collective waited in, and who waits in it") {
  const auto c = find_culprits({in(2, 9), out(0, 8), in(1, 9)});
  REQUIRE(c);
  CHECK(c->waited == 9);
  CHECK(c->waiting == std::vector<int>{1, 2});
  CHECK(c->ranks == std::vector<int>{0});
}
