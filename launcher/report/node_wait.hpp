// A node whose workers have all finished waits for the round's other nodes to finish theirs:
// it says so once, and /status shows it (waiting_for_nodes), so that the wait (torchrun's silent
// exit barrier) is not taken for a hang.
#pragma once

#include <string>
#include <vector>

#include "ddprun/rendezvous.hpp"

namespace ddprun::launcher {

// The round's nodes other than this one, by group rank: those this node waits for. It learns
// only that the job finished, not which of them already have: some may be done.
std::vector<int> other_group_ranks(const elastic::RoundAssignment& round);

// "ddprun: this node's workers are done (round R); waiting for the other N nodes of the round
// (group ranks ...) to finish theirs\n"; "" for a round of one node.
std::string done_waiting_line(const elastic::RoundAssignment& round);

}  // namespace ddprun::launcher
