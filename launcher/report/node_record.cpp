#include "report/node_record.hpp"

#include "ddprun/failure_kind.hpp"
#include "ddprun/failure_text.hpp"
#include "report/node_wait.hpp"

namespace ddprun::launcher {

NodeRecord::NodeRecord() {
  for (FailureKind kind : all_failure_kinds()) failures_by_kind[to_string(kind)] = 0;
}

std::vector<elastic::QuarantinedNode> note_quarantined(NodeRecord& record,
                                                       const std::vector<elastic::QuarantinedNode>& all) {
  if (all.size() <= record.quarantined.size()) return {};
  std::vector<elastic::QuarantinedNode> fresh(all.begin() + static_cast<long>(record.quarantined.size()), all.end());
  record.quarantined = all;
  return fresh;
}

JobView job_view(const NodeRecord& record, std::string_view phase, const NodeSettings& settings, double hang_timeout,
                 bool hang_reported, std::vector<RankView> ranks) {
  JobView view;
  view.phase = record.spare_place > 0 ? "spare" : std::string(phase);
  view.spare = record.spare_place;
  view.attempt = record.attempts_started - 1;
  view.round = record.round.round;
  view.restart_count = record.round.restart_count;
  view.max_restarts = settings.max_restarts;
  view.world_size = record.round.world_size;
  view.hang_timeout = hang_timeout;
  view.hung = hung_text(phase, hang_reported);
  view.host = settings.host;
  view.run_id = record.round_assigned ? record.round.run_id : settings.configured_run_id;
  if (record.round_assigned) {
    view.nodes = record.round.group_world_size;
    view.node_rank = record.round.group_rank;
  }
  view.rounds_started = record.attempts_started;
  view.hangs_found = record.hangs_found;
  view.failures = record.failures_by_kind;
  view.last_failure = record.last_failure;
  view.restart_reason = elastic::describe_restart(record.round.restart_reason);
  view.spares = record.job_spares;
  for (const auto& q : record.quarantined) view.quarantined.emplace_back(q.node, q.why);
  if (record.round_assigned && record.done_round == record.round.round && phase == "waiting") {
    view.waiting_for_nodes = other_group_ranks(record.round);
  }
  view.ranks = std::move(ranks);
  return view;
}

}  // namespace ddprun::launcher
