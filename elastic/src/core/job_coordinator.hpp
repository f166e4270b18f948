// The job's membership and rounds as a pure state machine: events in (a node joins, a worker
// failed, a node's workers stopped or succeeded, a node is gone, time passed), messages out
// (assign a round to a node, stop its round, finish its job). No I/O and no clock: every event
// carries `now`, in seconds on a monotonic clock, and next_deadline() says when tick() is due.
// The TCP server and the single-node rendezvous both drive one, so the rules live only here.
//
// Phases:
//   gathering  waiting for nodes: the round starts with MAX nodes at once, or with at least MIN
//              nodes when the last call ends (first round) or at once (later rounds: every node
//              the job knows is connected, nobody else to wait for). Fewer than MIN when
//              join_timeout passes: the job finishes with a rendezvous error.
//   running    the round's workers run. A worker failure, a lost node or an admissible new node
//              stops the round on every node (stopping), also on the nodes whose workers already
//              succeeded; when every node succeeded, the job finishes with success (the exit
//              barrier).
//   stopping   waiting for every node of the round to report its workers stopped (lost nodes
//              count as stopped; a node whose workers succeeded reports too, so that no next
//              round starts before its launcher has closed the round's store). Then: after a worker failure, a new round while the job-wide
//              restart budget lasts, otherwise the job finishes with the root cause (the earliest
//              failure), and only when the restart policy allows (restart_policy.hpp: kinds a
//              restart cannot fix, crash loops; the next round waits out its backoff while
//              gathering); after a membership change alone, a new round that uses no budget,
//              unless max_membership_changes rounds in a row already ended so (churn).
//   finished   every node got the same JobOutcome; new nodes are refused.
//
// Spares: the nodes beyond max_nodes. A round takes the last round's nodes first, then the
// earliest joined; every node left out is told it is a spare (Spare), when it joins a full
// round and at each round that leaves it out. A lost node's round ends at once, and the next
// round starts as soon as the others have stopped (every node the job knows is there): the
// earliest-joined spare takes its place, with no last call and no join timeout.
//
// Suspect nodes (quarantine.hpp): when a failed round is restarted and its root cause is of a
// hardware-like kind, it counts against the node whose worker it was; a node with
// quarantine_after of them within quarantine_window is quarantined if the job keeps MIN nodes
// without it (a spare takes its place, or the job shrinks) and it is not the TCP host (whose
// launcher the job's rendezvous runs in): it gets a Finish of its own (exit_code::kQuarantined)
// and the next round goes on without it. An etcd leader so quarantined hands the lead over.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/job_settings.hpp"
#include "core/join_refusal.hpp"

namespace ddprun::elastic {

struct Assign {
  NodeId node;
  RoundAssignment assignment;
};
struct Stop {
  NodeId node;
  int round;
  StopReason reason;
  std::string why;
};
struct Finish {  // also a refusal: then outcome.error says why
  NodeId node;
  JobOutcome outcome;
};
// The node has joined but the round is full: it waits as a hot spare (`place`: 1 for the one
// admitted first) and starts no workers until an Assign.
struct Spare {
  NodeId node;
  int place;
  std::string why;
};
using Message = std::variant<Assign, Stop, Finish, Spare>;
using Messages = std::vector<Message>;

// The node a message is for.
inline NodeId recipient(const Message& message) {
  return std::visit([](const auto& m) { return m.node; }, message);
}

class JobCoordinator {
 public:
  JobCoordinator(JobSettings settings, double now);

  // Refused (a Finish to `node` alone; the job goes on) when the run id or the job's settings
  // differ, the node_rank is taken or out of range, a field is out of range (nproc, the world
  // size it would make, master_port, addr, hostname), a peer says it hosts the rendezvous, a
  // second host joins, or the job has finished. The host's place in the group-rank order is
  // given by `joiner` alone.
  Messages join(NodeId node, const NodeSpec& spec, Joiner joiner, double now);
  // Whether `node` joined and is still in the job (false after a refusal).
  bool has_node(NodeId node) const { return nodes_.count(node) != 0; }
  // The workers of `node` as it joined with them; 0 when it is not in the job.
  int nproc(NodeId node) const {
    const auto it = nodes_.find(node);
    return it == nodes_.end() ? 0 : it->second.spec.nproc;
  }
  Messages worker_failed(NodeId node, int round, WorkerFailure failure, double now);
  Messages workers_stopped(NodeId node, int round, std::vector<WorkerFailure> failures, double now);
  Messages workers_succeeded(NodeId node, int round, double now);
  // The node's connection closed, its heartbeats stopped, or it left; `why` says which.
  Messages node_gone(NodeId node, const std::string& why, double now);
  // The node left because its own health check found it unfit (`why`): counted quarantined, as
  // the coordinator's own quarantine counts a node (every node's list of them), then gone.
  Messages node_quarantined(NodeId node, const std::string& why, double now);
  // Acts on deadlines that have passed.
  Messages tick(double now);

  // When tick() must be called next; none while nothing is timed.
  std::optional<double> next_deadline() const;
  bool finished() const { return phase_ == Phase::kFinished; }
  // Restarts made so far, the one a failed round just decided included.
  int restart_count() const { return restart_count_; }
  // What a next coordinator would need, and a number that changes whenever it does.
  JobHistory history() const;
  std::uint64_t history_version() const { return history_version_; }
  // The spares and the quarantined nodes, and a number that changes whenever they do (asking
  // costs a walk of the spares only).
  JobMembership membership() const;
  std::uint64_t membership_version() const { return membership_version_; }
  // While a restart waits out its backoff: when the next round may start.
  std::optional<double> restart_at() const {
    return backing_off_ ? std::optional<double>(not_before_) : std::nullopt;
  }

 private:
  enum class Phase { kGathering, kRunning, kStopping, kFinished };
  // A node's part in the current round: its workers run; it was told to stop, or failed, and
  // has not reported them stopped yet; they succeeded; they stopped.
  enum class Part { kRunning, kStopping, kSucceeded, kStopped };
  struct Node {
    NodeSpec spec;
    std::uint64_t join_order;
    int last_round;  // the last round it took part in; 0: none yet
  };

  // The parts of the round's nodes, with a count of each kind, so that no event walks every
  // node (a job of 10,000 nodes sends as many events a round).
  class Parts {
   public:
    using Map = std::map<NodeId, Part>;
    Map::iterator find(NodeId node) { return parts_.find(node); }
    Map::iterator begin() { return parts_.begin(); }
    Map::iterator end() { return parts_.end(); }
    Map::const_iterator begin() const { return parts_.begin(); }
    Map::const_iterator end() const { return parts_.end(); }
    std::size_t size() const { return parts_.size(); }
    std::size_t count(Part part) const { return counts_[static_cast<int>(part)]; }
    void add(NodeId node, Part part);
    void set(Map::iterator it, Part part);
    void erase(Map::iterator it);
    void clear();

   private:
    Map parts_;
    std::array<std::size_t, 4> counts_{};
  };

  // The part of `node` in the current round, if `round` is it and it runs or stops; else
  // parts_.end(): a report about another round, or from a node outside it, changes nothing.
  Parts::Map::iterator round_part(NodeId node, int round);
  // What join_refusal() checks `spec` against; every part a lookup.
  JoinContext join_context(NodeId node, const NodeSpec& spec) const;
  std::string node_name(NodeId node) const;
  std::string describe_node(NodeId node) const { return "node " + node_name(node); }
  std::string present_nodes() const;
  void gather(double now, Messages& out);
  void complete_if_ready(double now, Messages& out);
  void start_round(double now, Messages& out);
  Spare spare(NodeId node, int place) const;
  void stop_round(StopReason reason, const std::string& why, double now, Messages& out);
  void end_round_if_stopped(double now, Messages& out);
  void record(NodeId node, WorkerFailure failure);
  // After a failed round that is restarted: counts `root` against `node` and quarantines it
  // when decide_quarantine() says so (a Finish to it; the reason joins restart_reason_).
  void judge(NodeId node, const WorkerFailure& root, Messages& out);
  // Forgets a node that is gone or quarantined (not its part in the round).
  void forget(NodeId node);
  void finish(JobOutcome outcome, Messages& out);

  JobSettings settings_;
  Phase phase_ = Phase::kGathering;
  std::map<NodeId, Node> nodes_;  // joined and still connected: the round's nodes and those waiting
  std::map<int, NodeId> node_ranks_;  // the --node_rank of those of nodes_ that gave one
  std::optional<NodeId> host_;        // the one of nodes_ that Joiner::kHost joined
  std::int64_t workers_ = 0;          // the nproc of nodes_, summed: bounds every round's world size
  std::uint64_t joins_ = 0;
  int round_ = 0;
  int restart_count_ = 0;
  RestartPolicy restart_policy_;
  // The next round's restart: why, and the earliest time it may start (the crash-loop backoff).
  RestartReason restart_reason_;
  double backoff_ = 0;
  double not_before_ = 0;
  bool backing_off_ = false;  // gathering, and not_before_ has not come yet
  double round_started_ = 0;
  int membership_changes_ = 0;  // rounds in a row ended by joins and leaves without progress
  // gathering
  double join_deadline_;
  std::optional<double> last_call_deadline_;
  // running and stopping
  Parts parts_;  // the round's nodes: still connected, or lost after they succeeded
  std::size_t parts_gone_ = 0;  // those of parts_ lost after they succeeded
  bool round_failed_ = false;
  std::vector<WorkerFailure> failures_;  // this round's
  std::vector<NodeId> failure_nodes_;    // whose workers each of failures_ was
  // suspect nodes
  std::map<NodeId, std::vector<SuspectFailure>> suspects_;  // counted_failures() of each node
  std::vector<QuarantinedNode> quarantined_;
  std::uint64_t history_version_ = 0;
  std::vector<NodeId> spares_;  // the last round's spares and those that joined since, in order
  std::uint64_t membership_version_ = 0;
  // stopping
  double close_deadline_ = 0;
  std::string stop_why_;
  StopReason stop_reason_ = StopReason::kWorkerFailed;
};

}  // namespace ddprun::elastic
