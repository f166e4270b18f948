// The group-rank order of a round's nodes: which node is group rank 0 (MASTER_ADDR) and which
// comes next. Pure, apart from JobCoordinator so that it reads as the one rule it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::elastic {

// One node as the group-rank order sees it.
struct RankCandidate {
  int node_rank = -1;
  std::string hostname;
  std::string addr;
  bool hosts_rendezvous = false;
  std::uint64_t join_order = 0;
};

// The candidates' indices in group-rank order. A --node_rank is honoured when it is below the
// number of candidates; the other places go, in order, to the nodes whose --node_rank was too
// large (by node_rank), then to the rendezvous host, then to the rest by (hostname, addr) with
// numbers compared as numbers ("n2" before "n10"), then by join order.
std::vector<std::size_t> order_group_ranks(const std::vector<RankCandidate>& candidates);

}  // namespace ddprun::elastic
