// The decisions of --snapshot_replicas=K (replica/slots.hpp), as tables.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "replica/slots.hpp"

using namespace ddprun::elastic;

namespace {

ManifestEntry file(std::uint64_t clock, const char* origin) { return ManifestEntry{Version{clock, origin}, 10, false}; }

std::string paths(const ManifestEntries& entries) {
  std::string out;
  for (const auto& [path, entry] : entries) out += path + "@" + std::to_string(entry.version.clock) + " ";
  return out;
}

}  // namespace

TEST_CASE("K or all, decided per round: K of nodes-1 or more is all") {
  struct Row {
    int replicas;
    std::size_t nodes;
    bool by_slot;
  };
  const std::vector<Row> rows = {
      {0, 4, false}, {0, 100, false},  // all
      {1, 4, true},  {2, 4, true},  {3, 4, false}, {4, 4, false},
      {1, 3, true},  {1, 2, false}, {1, 1, false}, {1, 0, false},
  };
  for (const Row& row : rows) {
    CAPTURE(row.replicas);
    CAPTURE(row.nodes);
    CHECK(holds_by_slot(row.replicas, row.nodes) == row.by_slot);
  }
}

TEST_CASE("a node's copies are held by its K next nodes in the ring") {
  using V = std::vector<std::size_t>;
  CHECK(holders_of(4, 0, 1) == V{1});
  CHECK(holders_of(4, 3, 1) == V{0});
  CHECK(holders_of(5, 3, 2) == V{4, 0});
  CHECK(holders_of(3, 0, 9) == V{1, 2});  // at most the others
  CHECK(holders_of(1, 0, 1).empty());
}

TEST_CASE("what a member holds of a slot: its folder's when it shows it, its held copies, newest per path") {
  SlotReport r;
  r.node = "n";
  r.slot = 2;
  r.shown = {{"a", file(5, "x")}, {"b", file(1, "x")}};
  r.held = {{2, {{"b", file(3, "y")}, {"c", file(1, "y")}}}, {0, {}}};
  bool any = false;
  CHECK(paths(slot_entries(r, 2, &any)) == "a@5 b@3 c@1 ");
  CHECK(any);
  CHECK(paths(slot_entries(r, 0, &any)).empty());
  CHECK(any);  // a key, even empty: it holds for slot 0
  CHECK(paths(slot_entries(r, 1, &any)).empty());
  CHECK_FALSE(any);
  CHECK(paths(all_entries(r)) == "a@5 b@3 c@1 ");
}

TEST_CASE("the previous ring: the newest round a member tells") {
  SlotReport spare{"s", -1, {}, {}, -1, {}};
  SlotReport old{"o", 0, {}, {}, 3, {"a", "b"}};
  SlotReport newer{"n", 1, {}, {}, 5, {"b", "c", "d"}};
  CHECK(previous_ring({spare}).empty());
  CHECK(previous_ring({spare, old}) == std::vector<std::string>{"a", "b"});
  CHECK(previous_ring({old, newer, spare}) == std::vector<std::string>{"b", "c", "d"});
}

TEST_CASE("restore sources, lost slots, dropped slots, what the new holders lack") {
  SlotReport holder{"h", 3, {{"h.pt", file(1, "h")}}, {{1, {{"one.pt", file(4, "o")}}}}, 2, {"z", "o", "h", "q"}};
  SlotReport other{"q", 0, {{"q.pt", file(2, "q")}}, {{2, {}}}, 2, {"z", "o", "h", "q"}};
  // Slot 1's folder: held by h only.
  const auto sources = slot_sources({holder, other}, 1);
  REQUIRE(sources.size() == 1);
  CHECK(sources[0].node == "h");
  CHECK(paths(sources[0].entries) == "one.pt@4 ");
  CHECK(slot_sources({holder, other}, 3).size() == 1);  // h shows slot 3 (before it starts the round)
  // Lost: a slot of the previous round that nobody holds anything for.
  CHECK_FALSE(slot_lost({holder, other}, 1, 4));
  CHECK_FALSE(slot_lost({holder, other}, 2, 4));  // q holds for it, though nothing
  CHECK(slot_lost({holder, other}, 0, 4) == false);  // q shows slot 0
  SlotReport spare{"s", -1, {}, {}, -1, {}};
  CHECK(slot_lost({spare, other}, 1, 4));
  CHECK_FALSE(slot_lost({spare, other}, 4, 4));  // a new slot: nothing to lose
  // A shrink: the held copies of slots past the new ring go.
  CHECK(dropped_slots({{0, {}}, {3, {}}, {5, {}}}, 4) == std::vector<int>{5});
  CHECK(dropped_slots({{0, {}}, {3, {}}}, 3) == std::vector<int>{3});
  // The new holders: what they lack (or hold older) of the folder; one that did not answer, everything.
  const ManifestEntries shown = {{"one.pt", file(4, "o")}, {"two.pt", file(6, "s")}};
  CHECK(paths(missing_at_holders(shown, 1, {&holder})) == "two.pt@6 ");
  CHECK(paths(missing_at_holders(shown, 1, {&holder, nullptr})) == "one.pt@4 two.pt@6 ");
  SlotReport stale{"t", 0, {}, {{1, {{"one.pt", file(2, "o")}, {"two.pt", file(6, "s")}}}}, 2, {}};
  CHECK(paths(missing_at_holders(shown, 1, {&stale})) == "one.pt@4 ");
}
