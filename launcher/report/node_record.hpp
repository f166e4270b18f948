// What one node's agent has seen of the job so far (the round, its starts, its failures by kind,
// the spares and quarantined nodes), and the live view (status_view.hpp) made from it. Pure;
// tested as tables.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous.hpp"
#include "report/status_view.hpp"

namespace ddprun::launcher {

struct NodeRecord {
  elastic::RoundAssignment round;  // the last round assigned
  bool round_assigned = false;
  int attempts_started = 0;        // this node's starts of its workers
  int spare_place = 0;             // waits as hot spare number N; 0: it does not
  int done_round = -1;             // the round whose workers all finished here (then it waits)
  int hangs_found = 0;             // rounds in which this node found a hang (ddprun_hangs_total)
  std::map<std::string, int> failures_by_kind;  // every kind of the vocabulary, from 0 (/metrics)
  std::optional<FailureView> last_failure;
  // The job's spares, known on the node that runs the coordinator only.
  std::optional<std::vector<std::string>> job_spares;
  std::vector<elastic::QuarantinedNode> quarantined;  // the job's quarantined nodes so far

  NodeRecord();
};

// Takes the coordinator's list of every node quarantined so far; returns those not seen before,
// to be logged once each.
std::vector<elastic::QuarantinedNode> note_quarantined(NodeRecord& record,
                                                       const std::vector<elastic::QuarantinedNode>& all);

// What does not change during the run.
struct NodeSettings {
  std::string host;
  std::string configured_run_id;  // --rdzv_id, shown until a round names the job's
  int max_restarts = 0;
};

// The live view: `phase` the agent's as /status names it (supervisor.hpp's status_name());
// `ranks` are this node's workers as the watchdog sees them; `hang_timeout` the one in force (0:
// none); `hang_reported` whether this round's hang was found.
JobView job_view(const NodeRecord& record, std::string_view phase, const NodeSettings& settings, double hang_timeout,
                 bool hang_reported, std::vector<RankView> ranks);

}  // namespace ddprun::launcher
