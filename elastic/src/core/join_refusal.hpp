// Whether a node that joins is refused, and why: its spec checked against the job's settings and
// what the job already holds. Pure: JobCoordinator looks up what the job holds (each a lookup,
// so that a join costs O(log N), not a walk of the nodes already joined) and sends the refusal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/job_settings.hpp"

namespace ddprun::elastic {

// What the job holds that a joining node is checked against.
struct JoinContext {
  bool finished = false;
  std::optional<std::string> host;           // the name of the node that joined as Joiner::kHost, if one did
  bool host_is_joiner = false;               // that node is the one joining now
  bool joined = false;                       // the joining node is already in the job
  std::size_t nodes = 0;                     // nodes in the job
  std::int64_t workers = 0;                  // their nproc, summed
  std::optional<std::string> rank_taken_by;  // the node holding the spec's --node_rank, if any
};

// The refusal, one line naming the flag to fix, or none. Refused when the job has finished, a
// peer says it hosts the rendezvous, a second host joins, the run id or a setting every node
// must share differs, a field is out of range (node_rank, nproc, the world size it would make,
// master_port, a peer's addr and hostname), the node joined twice, the spares are full, or the
// node_rank is taken; checked in that order.
std::optional<std::string> join_refusal(const JobSettings& settings, const NodeSpec& spec, Joiner joiner,
                                        const JoinContext& job);

// --nnodes as a user writes it: N, or MIN:MAX.
std::string nnodes(int min_nodes, int max_nodes);

}  // namespace ddprun::elastic
