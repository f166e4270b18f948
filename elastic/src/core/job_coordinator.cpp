#include "core/job_coordinator.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/group_ranks.hpp"
#include "core/node_identity.hpp"
#include "core/round_end.hpp"
#include "ddprun/failure_text.hpp"
#include "ddprun/exit_codes.hpp"

namespace ddprun::elastic {

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::kWorkerFailed: return "worker_failed";
    case StopReason::kNodeLost: return "node_lost";
    case StopReason::kMembershipChange: return "membership_change";
    case StopReason::kShutdown: return "shutdown";
  }
  return "unknown";
}

JobCoordinator::JobCoordinator(JobSettings settings, double now)
    : settings_(std::move(settings)),
      round_(settings_.rounds_before),
      restart_count_(settings_.restarts_used),
      restart_policy_(settings_.max_restarts, settings_.restart, settings_.restarts_used, now),
      join_deadline_(now + settings_.join_timeout),
      suspects_(settings_.history.suspects),
      quarantined_(settings_.history.quarantined) {
  if (settings_.history.restart) restart_policy_.restore(*settings_.history.restart);
  restart_reason_ = settings_.history.restart_reason;
}

JobHistory JobCoordinator::history() const {
  return {restart_policy_.history(), suspects_, quarantined_, restart_reason_};
}

JobMembership JobCoordinator::membership() const {
  JobMembership m;
  for (NodeId id : spares_) m.spares.push_back(node_name(id));
  m.quarantined = quarantined_;
  return m;
}

JoinContext JobCoordinator::join_context(NodeId node, const NodeSpec& spec) const {
  JoinContext c;
  c.finished = phase_ == Phase::kFinished;
  if (host_) c.host = node_name(*host_);
  c.host_is_joiner = host_ == node;
  c.joined = nodes_.count(node) != 0;
  c.nodes = nodes_.size();
  c.workers = workers_;
  if (spec.node_rank >= 0) {
    if (const auto taken = node_ranks_.find(spec.node_rank); taken != node_ranks_.end()) {
      c.rank_taken_by = describe_node(taken->second);
    }
  }
  return c;
}

std::string JobCoordinator::node_name(NodeId node) const {
  const NodeSpec& spec = nodes_.at(node).spec;
  if (spec.hostname.empty() || spec.hostname == spec.addr) return spec.addr;
  return fmt::format("{} ({})", spec.hostname, spec.addr);
}

std::string JobCoordinator::present_nodes() const {
  std::string list;
  for (const auto& [id, node] : nodes_) {
    list += (list.empty() ? ": " : ", ") + node_name(id);
  }
  return fmt::format("{}{}", nodes_.size(), list);
}

Messages JobCoordinator::join(NodeId node, const NodeSpec& spec, Joiner joiner, double now) {
  Messages out;
  if (auto why = join_refusal(settings_, spec, joiner, join_context(node, spec))) {
    out.push_back(Finish{node, rendezvous_failure(*why, restart_count_)});
    return out;
  }
  Node& joined = nodes_.emplace(node, Node{spec, joins_++, 0}).first->second;
  joined.spec.hosts_rendezvous = joiner == Joiner::kHost;
  if (joiner == Joiner::kHost) host_ = node;
  workers_ += spec.nproc;
  if (spec.node_rank >= 0) node_ranks_.emplace(spec.node_rank, node);
  switch (phase_) {
    case Phase::kGathering:
      complete_if_ready(now, out);
      break;
    case Phase::kRunning: {
      // Admitted at once, by ending the round, while there is room and no node has finished
      // (the job is ending then); otherwise it waits as a spare, to replace a node that is lost.
      const bool ending = parts_.count(Part::kSucceeded) > 0;
      if (static_cast<int>(parts_.size()) < settings_.max_nodes && !ending) {
        stop_round(StopReason::kMembershipChange,
                   fmt::format("{} joined; admitting it in the next round", describe_node(node)), now, out);
      } else {
        out.push_back(spare(node, static_cast<int>(nodes_.size() - (parts_.size() - parts_gone_))));
        spares_.push_back(node);
        ++membership_version_;
      }
      break;
    }
    case Phase::kStopping:  // it takes part in the next round
    case Phase::kFinished:  // refused above
      break;
  }
  return out;
}

JobCoordinator::Parts::Map::iterator JobCoordinator::round_part(NodeId node, int round) {
  if ((phase_ != Phase::kRunning && phase_ != Phase::kStopping) || round != round_) return parts_.end();
  return parts_.find(node);
}

Messages JobCoordinator::worker_failed(NodeId node, int round, WorkerFailure failure, double now) {
  Messages out;
  const auto part = round_part(node, round);
  if (part == parts_.end()) return out;
  record(node, std::move(failure));
  if (part->second == Part::kRunning) parts_.set(part, Part::kStopping);  // it stops its own workers
  if (phase_ == Phase::kRunning) {
    stop_round(StopReason::kWorkerFailed, describe_stop(failures_.back()), now, out);
  }
  return out;
}

Messages JobCoordinator::workers_stopped(NodeId node, int round, std::vector<WorkerFailure> failures, double now) {
  Messages out;
  const auto part = round_part(node, round);
  if (part == parts_.end() || (part->second != Part::kRunning && part->second != Part::kStopping)) return out;
  const bool failed = !failures.empty();
  for (WorkerFailure& failure : failures) record(node, std::move(failure));
  parts_.set(part, Part::kStopped);
  if (phase_ == Phase::kRunning) {
    // Stopped on its own without calling worker_failed first: still ends the round everywhere.
    if (!failed) {
      stop_round(StopReason::kMembershipChange, describe_node(node) + " stopped its workers", now, out);
    } else {
      stop_round(StopReason::kWorkerFailed, describe_stop(failures_.back()), now, out);
    }
  } else {
    end_round_if_stopped(now, out);
  }
  return out;
}

Messages JobCoordinator::workers_succeeded(NodeId node, int round, double /*now*/) {
  Messages out;
  const auto part = round_part(node, round);
  if (part == parts_.end() || (part->second != Part::kRunning && part->second != Part::kStopping)) return out;
  // Finished before the stop reached it: its report that it stopped follows the stop.
  if (phase_ == Phase::kStopping) return out;
  parts_.set(part, Part::kSucceeded);
  if (parts_.count(Part::kSucceeded) == parts_.size()) {
    JobOutcome success;
    success.restarts = restart_count_;
    finish(success, out);
  }
  return out;
}

Messages JobCoordinator::node_gone(NodeId node, const std::string& why, double now) {
  Messages out;
  if (nodes_.count(node) == 0) return out;
  const std::string name = describe_node(node);
  forget(node);
  const auto part = parts_.find(node);
  switch (phase_) {
    case Phase::kGathering:
      complete_if_ready(now, out);
      break;
    case Phase::kRunning:
      // Not in the round: it was waiting for room. Succeeded: its share of the job is done and
      // the others finish without it.
      if (part != parts_.end() && part->second == Part::kSucceeded) ++parts_gone_;
      if (part == parts_.end() || part->second == Part::kSucceeded) break;
      parts_.erase(part);
      stop_round(StopReason::kNodeLost, fmt::format("{} was lost: {}", name, why), now, out);
      break;
    case Phase::kStopping:
      if (part != parts_.end()) parts_.erase(part);
      end_round_if_stopped(now, out);
      break;
    case Phase::kFinished:
      break;
  }
  return out;
}

Messages JobCoordinator::node_quarantined(NodeId node, const std::string& why, double now) {
  if (nodes_.count(node) == 0) return {};
  quarantined_.push_back({node_name(node), why});
  ++membership_version_;
  return node_gone(node, "it is quarantined: " + why, now);
}

Messages JobCoordinator::tick(double now) {
  Messages out;
  if (phase_ == Phase::kGathering) {
    if (static_cast<int>(nodes_.size()) >= settings_.min_nodes) {
      complete_if_ready(now, out);
    } else if (now >= join_deadline_) {
      finish(rendezvous_failure(fmt::format(
                 "timed out after {} s waiting for {}{} nodes to join round {} of rendezvous '{}' (have {}); "
                 "start the missing nodes or raise --rdzv_conf join_timeout=SECONDS",
                 settings_.join_timeout, settings_.min_nodes == settings_.max_nodes ? "" : "at least ",
                 settings_.min_nodes, round_ + 1, settings_.run_id, present_nodes()),
                                restart_count_),
             out);
    }
  } else if (phase_ == Phase::kStopping && now >= close_deadline_) {
    std::string pending;
    for (const auto& [id, part] : parts_) {
      if (part == Part::kRunning || part == Part::kStopping) pending += (pending.empty() ? "" : ", ") + describe_node(id);
    }
    finish(rendezvous_failure(fmt::format(
               "{} did not report its workers stopped within {} s after round {} ended ({}); raise --rdzv_conf "
               "close_timeout=SECONDS",
               pending, settings_.close_timeout, round_, stop_why_),
                              restart_count_),
           out);
  }
  return out;
}

std::optional<double> JobCoordinator::next_deadline() const {
  switch (phase_) {
    case Phase::kGathering:
      if (static_cast<int>(nodes_.size()) < settings_.min_nodes) return join_deadline_;
      if (backing_off_) return not_before_;
      return last_call_deadline_;
    case Phase::kStopping:
      return close_deadline_;
    case Phase::kRunning:
    case Phase::kFinished:
      break;
  }
  return std::nullopt;
}

void JobCoordinator::gather(double now, Messages& out) {
  phase_ = Phase::kGathering;
  parts_.clear();
  last_call_deadline_.reset();
  join_deadline_ = std::max(now, not_before_) + settings_.join_timeout;
  backing_off_ = now < not_before_;
  if (static_cast<int>(nodes_.size()) >= settings_.min_nodes && !backing_off_) {
    start_round(now, out);  // every node the job knows is here: no last call
  }
}

void JobCoordinator::complete_if_ready(double now, Messages& out) {
  const int n = static_cast<int>(nodes_.size());
  if (backing_off_) {
    if (now < not_before_) return;  // a crash loop's backoff: tick() comes back at not_before_
    backing_off_ = false;
    if (n >= settings_.min_nodes) return start_round(now, out);  // as gather() would have
  }
  if (n >= settings_.max_nodes) {
    start_round(now, out);
  } else if (n < settings_.min_nodes) {
    last_call_deadline_.reset();
  } else {
    if (!last_call_deadline_) last_call_deadline_ = now + settings_.last_call_timeout;
    if (now >= *last_call_deadline_) start_round(now, out);
  }
}

void JobCoordinator::start_round(double now, Messages& out) {
  // With more nodes than MAX, the last round's nodes keep their places, then the earliest to join.
  // Each node's key taken once: looking both nodes up in every comparison was a quarter of the
  // round's start at 10,000 nodes. Join orders are unique.
  struct Place {
    bool kept;  // in the last round
    std::uint64_t join_order;
    NodeId id;
  };
  std::vector<Place> places;
  places.reserve(nodes_.size());
  for (const auto& [id, node] : nodes_) places.push_back({round_ > 0 && node.last_round == round_, node.join_order, id});
  std::sort(places.begin(), places.end(), [](const Place& a, const Place& b) {
    if (a.kept != b.kept) return a.kept;
    return a.join_order < b.join_order;
  });
  std::vector<NodeId> ids;
  ids.reserve(places.size());
  for (const Place& place : places) ids.push_back(place.id);
  const std::vector<NodeId> spares(ids.begin() + std::min<std::size_t>(ids.size(), settings_.max_nodes), ids.end());
  ids.resize(ids.size() - spares.size());
  if (spares != spares_) {
    spares_ = spares;
    ++membership_version_;
  }

  std::vector<RankCandidate> candidates;
  for (NodeId id : ids) {
    const Node& node = nodes_.at(id);
    candidates.push_back(
        {node.spec.node_rank, node.spec.hostname, node.spec.addr, node.spec.hosts_rendezvous, node.join_order});
  }
  const std::vector<std::size_t> order = order_group_ranks(candidates);

  ++round_;
  round_started_ = now;
  phase_ = Phase::kRunning;
  round_failed_ = false;
  failures_.clear();
  failure_nodes_.clear();
  last_call_deadline_.reset();
  parts_.clear();
  parts_gone_ = 0;

  int world_size = 0;
  for (NodeId id : ids) world_size += nodes_.at(id).spec.nproc;
  const NodeSpec& master = nodes_.at(ids[order.front()]).spec;
  std::vector<SnapshotPeer> snapshot_peers;
  if (order.size() <= static_cast<std::size_t>(kMaxSnapshotRing)) {
    for (std::size_t i : order) {
      const NodeSpec& spec = nodes_.at(ids[i]).spec;
      if (spec.snapshot_port <= 0) {
        snapshot_peers.clear();
        break;
      }
      snapshot_peers.push_back({spec.snapshot_node, spec.addr, spec.snapshot_port});
    }
  }
  int base_rank = 0;
  for (std::size_t group_rank = 0; group_rank < order.size(); ++group_rank) {
    const NodeId id = ids[order[group_rank]];
    Node& node = nodes_.at(id);
    RoundAssignment a;
    a.round = round_;
    a.restart_count = restart_count_;
    a.group_rank = static_cast<int>(group_rank);
    a.group_world_size = static_cast<int>(order.size());
    a.base_rank = base_rank;
    a.world_size = world_size;
    a.master_addr = master.addr;
    a.master_port = master.master_port;
    a.agent_store = master.agent_store;
    a.run_id = settings_.run_id;
    a.restart_reason = restart_reason_;
    a.backoff = backoff_;
    a.quarantined = quarantined_;
    a.snapshot_peers = snapshot_peers;
    out.push_back(Assign{id, a});
    parts_.add(id, Part::kRunning);
    node.last_round = round_;
    base_rank += node.spec.nproc;
  }
  for (std::size_t i = 0; i < spares.size(); ++i) out.push_back(spare(spares[i], static_cast<int>(i + 1)));
}

Spare JobCoordinator::spare(NodeId node, int place) const {
  return {node, place,
          fmt::format("rendezvous '{}' runs round {} with its {} nodes (--nnodes={}); this node waits as spare {} "
                      "and takes the place of a node that is lost",
                      settings_.run_id, round_, settings_.max_nodes,
                      nnodes(settings_.min_nodes, settings_.max_nodes), place)};
}

void JobCoordinator::stop_round(StopReason reason, const std::string& why, double now, Messages& out) {
  phase_ = Phase::kStopping;
  close_deadline_ = now + settings_.close_timeout;
  stop_why_ = why;
  stop_reason_ = reason;
  // Nodes whose workers succeeded have none to stop, but their launcher may serve the round's
  // store (MASTER_PORT): the next round waits until it has stopped taking new connections.
  for (auto it = parts_.begin(); it != parts_.end(); ++it) {
    if (it->second == Part::kRunning || it->second == Part::kSucceeded) {
      out.push_back(Stop{it->first, round_, reason, why});
      parts_.set(it, Part::kStopping);
    }
  }
  end_round_if_stopped(now, out);
}

void JobCoordinator::end_round_if_stopped(double now, Messages& out) {
  if (parts_.count(Part::kRunning) + parts_.count(Part::kStopping) > 0) return;
  RoundEndCase c(restart_policy_);
  c.failures = std::move(failures_);
  c.failure_nodes = std::move(failure_nodes_);
  c.now = now;
  c.ran_for = now - round_started_;
  c.restart_count = restart_count_;
  c.membership_changes = membership_changes_;
  c.stop_why = stop_why_;
  failures_.clear();
  failure_nodes_.clear();
  RoundEnd end = decide_round_end(std::move(c), settings_);
  restart_policy_ = std::move(end.policy);
  if (round_failed_) ++history_version_;
  restart_count_ = end.restart_count;
  membership_changes_ = end.membership_changes;
  restart_reason_ = std::move(end.restart_reason);
  backoff_ = end.backoff;
  if (end.finish) return finish(std::move(*end.finish), out);
  if (end.root) {
    not_before_ = now + end.backoff;
    judge(end.root_node, *end.root, out);
  }
  gather(now, out);
}

void JobCoordinator::Parts::add(NodeId node, Part part) {
  parts_.emplace(node, part);
  ++counts_[static_cast<int>(part)];
}

void JobCoordinator::Parts::set(Map::iterator it, Part part) {
  --counts_[static_cast<int>(it->second)];
  it->second = part;
  ++counts_[static_cast<int>(part)];
}

void JobCoordinator::Parts::erase(Map::iterator it) {
  --counts_[static_cast<int>(it->second)];
  parts_.erase(it);
}

void JobCoordinator::Parts::clear() {
  parts_.clear();
  counts_ = {};
}

void JobCoordinator::record(NodeId node, WorkerFailure failure) {
  // A worker that fails while the round stops for a node lost or a change of members failed of the
  // stop (a SIGTERM handler that raises, a collective whose peer went): the round's end is the
  // node's loss, which a spare or the survivors take up without a restart of the budget.
  if (phase_ == Phase::kStopping && stop_reason_ != StopReason::kWorkerFailed && stop_reason_ != StopReason::kShutdown) {
    return;
  }
  if (failure.host.empty()) failure.host = nodes_.at(node).spec.hostname;
  failures_.push_back(std::move(failure));
  failure_nodes_.push_back(node);
  round_failed_ = true;
}

void JobCoordinator::judge(NodeId node, const WorkerFailure& root, Messages& out) {
  if (settings_.quarantine.after <= 0 || !root.kind.hardware_like() || nodes_.count(node) == 0) return;
  std::vector<SuspectFailure>& counted = suspects_[node];
  counted = counted_failures(settings_.quarantine, std::move(counted), {root.timestamp, root.kind});
  QuarantineCase c;
  c.settings = settings_.quarantine;
  c.failures = counted;
  c.nodes_without = static_cast<int>(nodes_.size()) - 1;
  c.min_nodes = settings_.min_nodes;
  c.runs_rendezvous = node == host_;
  const QuarantineDecision d = decide_quarantine(c);
  if (!d.suspect) return;
  if (!d.quarantine) {
    restart_reason_.nodes.push_back(fmt::format("{} is suspect: {}", describe_node(node), d.why));
    return;
  }
  restart_reason_.nodes.push_back(
      fmt::format("{} is quarantined: {}; the job goes on without it", describe_node(node), d.why));
  quarantined_.push_back({node_name(node), d.why});
  suspects_.erase(node);
  JobOutcome outcome;
  outcome.exit_code = exit_code::kQuarantined;
  outcome.error = fmt::format("this node ({}) is quarantined: {}; the job goes on without it", node_name(node), d.why);
  outcome.failures = {root};
  outcome.restarts = restart_count_;
  outcome.quarantined = quarantined_;
  out.push_back(Finish{node, outcome});
  forget(node);
  ++membership_version_;
}

void JobCoordinator::forget(NodeId node) {
  const Node& gone = nodes_.at(node);
  if (gone.spec.node_rank >= 0) node_ranks_.erase(gone.spec.node_rank);
  if (host_ == node) host_.reset();
  workers_ -= gone.spec.nproc;
  nodes_.erase(node);
  if (suspects_.erase(node) != 0) ++history_version_;  // a node that comes back is a new node
  if (const auto spare = std::find(spares_.begin(), spares_.end(), node); spare != spares_.end()) {
    spares_.erase(spare);
    ++membership_version_;
  }
}

void JobCoordinator::finish(JobOutcome outcome, Messages& out) {
  phase_ = Phase::kFinished;
  outcome.quarantined = quarantined_;
  parts_.clear();
  for (const auto& [id, node] : nodes_) out.push_back(Finish{id, outcome});
}

}  // namespace ddprun::elastic
