// How a round ends once every node of it has stopped: after a worker failure, the root cause
// and whether the job restarts (restart_policy.hpp) or finishes with it; after nodes joined or
// left, whether the change was free or costs a restart (max_membership_changes), or ends the job
// because the budget is spent. Pure: the restart policy goes in and comes out as a value;
// JobCoordinator carries the decision out (and quarantine.hpp's judgement of the root cause's
// node, which needs the job's nodes).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/job_settings.hpp"

namespace ddprun::elastic {

struct RoundEndCase {
  explicit RoundEndCase(RestartPolicy job_policy) : policy(std::move(job_policy)) {}
  RestartPolicy policy;                 // the job's, before this round's decision
  std::vector<WorkerFailure> failures;  // the round's, as reported; none: nodes joined or left
  std::vector<NodeId> failure_nodes;    // whose workers each of failures was
  double now = 0;
  double ran_for = 0;          // seconds since the round started
  int restart_count = 0;       // restarts made before this round ended
  int membership_changes = 0;  // rounds in a row ended by joins and leaves, before this one
  std::string stop_why;        // why the round was stopped
};

struct RoundEnd {
  explicit RoundEnd(RestartPolicy decided) : policy(std::move(decided)) {}
  RestartPolicy policy;  // after the decision
  // The job ends with this outcome (to every node); none: a next round gathers.
  std::optional<JobOutcome> finish;
  int restart_count = 0;
  int membership_changes = 0;
  // A failed round that restarts: why, its backoff, and the root cause and its node, whose
  // quarantine the coordinator judges.
  RestartReason restart_reason;
  double backoff = 0;
  std::optional<WorkerFailure> root;
  NodeId root_node = 0;
};

// The root cause first: the earliest failure of those that were not only a consequence of
// another (a rank whose peer's connection closed under it), then the others in the same order;
// ties keep their reported order. Returns the index, in `failures` as given, of the root.
std::size_t order_by_cause(std::vector<WorkerFailure>& failures);

// The end of a round whose nodes have all stopped. A failed round's restart is counted in the
// policy that comes back (RestartPolicy::decide), and the failures come back in order_by_cause()'s
// order, in `finish` or, the root alone, in `root`.
RoundEnd decide_round_end(RoundEndCase c, const JobSettings& settings);

}  // namespace ddprun::elastic
