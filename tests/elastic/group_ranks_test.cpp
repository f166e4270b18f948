#include "core/group_ranks.hpp"

#include <doctest/doctest.h>

namespace ddprun::elastic {
namespace {

TEST_CASE("group rank order") {
  struct Case {
    std::string name;
    std::vector<RankCandidate> candidates;
    std::vector<std::size_t> order;
  };
  auto node = [](int rank, std::string host, std::string addr, std::uint64_t joined, bool hosts = false) {
    return RankCandidate{rank, std::move(host), std::move(addr), hosts, joined};
  };
  const std::vector<Case> cases = {
      {"node ranks exactly", {node(2, "a", "1", 0), node(0, "b", "2", 1), node(1, "c", "3", 2)}, {1, 2, 0}},
      {"hostnames, numbers as numbers",
       {node(-1, "n10", "1", 0), node(-1, "n2", "2", 1), node(-1, "n1", "3", 2)},
       {2, 1, 0}},
      {"addresses when hostnames are equal",
       {node(-1, "vm", "127.0.0.10", 0), node(-1, "vm", "127.0.0.9", 1), node(-1, "vm", "127.0.0.2", 2)},
       {2, 1, 0}},
      {"join order when all else is equal", {node(-1, "vm", "a", 1), node(-1, "vm", "a", 0)}, {1, 0}},
      {"the rendezvous host first", {node(-1, "a", "1", 0), node(-1, "z", "9", 1, true)}, {1, 0}},
      {"a given rank keeps its place, the others fill around it",
       {node(-1, "a", "1", 0), node(1, "z", "9", 1), node(-1, "b", "2", 2)},
       {0, 1, 2}},
      {"a rank too large for this round goes before the unranked",
       {node(-1, "a", "1", 0), node(5, "z", "9", 1), node(3, "y", "8", 2)},
       {2, 1, 0}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK(order_group_ranks(c.candidates) == c.order);
  }
}

}  // namespace
}  // namespace ddprun::elastic
