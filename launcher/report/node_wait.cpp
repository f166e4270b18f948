#include "report/node_wait.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun::launcher {

std::vector<int> other_group_ranks(const elastic::RoundAssignment& round) {
  std::vector<int> ranks;
  for (int r = 0; r < round.group_world_size; ++r) {
    if (r != round.group_rank) ranks.push_back(r);
  }
  return ranks;
}

std::string done_waiting_line(const elastic::RoundAssignment& round) {
  const std::vector<int> others = other_group_ranks(round);
  if (others.empty()) return "";
  return fmt::format(
      "ddprun: this node's workers are done (round {}); waiting for the other {} {} of the round ({} {}) to finish "
      "theirs\n",
      round.round, others.size(), others.size() == 1 ? "node" : "nodes", others.size() == 1 ? "group rank" : "group ranks",
      fmt::join(others, ", "));
}

}  // namespace ddprun::launcher
