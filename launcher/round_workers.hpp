// This node's workers through one round, for the agent (agent.hpp): their start (after the warm
// interpreter's imports, with --warm_start; none past the fence's deadline), each end judged
// (report/worker_end.hpp) and, for a failure, its identity, evidence and kind
// (report/failure_classifier.hpp), handed to the agent's loop as occurrences (occurrence.hpp);
// then AllEnded once none is left, and the round's end. It owns the worker group; the workers'
// records in the event log are written here.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <asio/steady_timer.hpp>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "ddprun/snapshot_replication.hpp"
#include "hangs/hang_watch.hpp"
#include "occurrence.hpp"
#include "output/event_log.hpp"
#include "process/containment.hpp"
#include "process/worker_group.hpp"
#include "report/node_record.hpp"
#include "snapshots/commit_watch.hpp"
#include "snapshots/dying_gasp.hpp"

namespace ddprun::launcher {

class RoundWorkers {
 public:
  // What it reads of the agent's and writes to it; all outlive it.
  struct Context {
    asio::io_context& io;
    const config::LaunchConfig& config;
    const std::map<std::string, std::string>& environ;
    const config::PythonInterpreter& python;  // for a Python worker's import error
    const RunPaths& paths;
    const NodeSettings& settings;
    const Phase& phase;          // the supervisor's: a failure while stopping is after another
    NodeRecord& node;            // its round; the last failure, set here
    OrphanGuard& guard;
    Containment& containment;
    EventLog& events;
    std::function<void(Occurrence)> dispatch;
    // The snapshot folder's replication across nodes; null: none (one node, --snapshot=off, no
    // secret). With a round that lists replicators, the workers start after its restore.
    elastic::SnapshotReplication* replication = nullptr;
  };
  explicit RoundWorkers(Context context);

  WorkerGroup& group() { return group_; }
  // The hang watch, made after this (its hooks call identity() and failed()).
  void watch_hangs(HangWatch& hangs) { hangs_ = &hangs; }
  // The rendezvous fence's deadlines, moved (Rendezvous::Handlers::fence_moved): no worker starts
  // at or after `fence`, and a SIGKILL from outside past `backstop` is the orphan guard's fence.
  void fence_moved(std::optional<elastic::FenceDeadlines> at) { fence_ = at; }
  // The snapshot folder's watch (none with --snapshot=off): told of each reap, right after the
  // waitpid, and of the round's end, once what the workers left behind is killed.
  void watch_commits(CommitWatch* commits) { commits_ = commits; }
  // The workers not reaped yet, as the snapshot folder's watch looks at them.
  std::vector<CommitWatch::Worker> unreaped() const;

  // Starts the workers of the node's round as its start `attempt`, once this node's snapshot
  // folder holds what the round's other nodes hold (SnapshotReplication::start_round, when the
  // round lists replicators) and the warm interpreter is ready (WarmStart::when_ready); then
  // dispatches WorkersStarted. None starts at or after the
  // fence's deadline (then Fenced is dispatched); a worker that could not start is dispatched as
  // a failure.
  void start(int attempt);
  // No worker starts any more: a start that waits for the warm interpreter is given up.
  void cancel_start();
  // The workers were told to stop: GraceExpired is dispatched if this round is still open in
  // `seconds` (--shutdown_timeout).
  void arm_grace(double seconds);
  // The dying gasp (--snapshot_signal): `signal` to each live worker's own process; GaspEnded is
  // dispatched if this round is still open in `grace` seconds (--snapshot_grace).
  void gasp(int signal, double grace);
  // The gasp is over (`how`; `by_signal`: the shutdown signal that cut it short): its timer
  // cancelled, what the workers wrote in DDPRUN_SNAPSHOT_DIR since the signal said on the console
  // and in the event log. Once a gasp.
  void end_gasp(GaspEnd how, int by_signal);
  // Children ended (SIGCHLD): each worker's end is dispatched, a success or a failure (or the
  // orphan guard's fence). A child that is not a worker is offered to `claim` (the health check)
  // with its wait status, then to the hang response (its stack tools).
  void reap(const std::function<bool(pid_t, int)>& claim);
  // The workers are gone: what is left in their pipes is taken and their files cleared. Once a
  // round: the report of its end and an exit right after it both ask for it.
  void end_round();

  // What a hang's response asks of the round (hangs/hang_response.hpp): a worker's identity,
  // the round whose workers run, whether a round still matters, and where its failures go.
  void answer_hangs(HangResponse::Handlers& h);
  // Finds `failure`'s kind, once the other workers were told to stop (occurrence.hpp).
  void classify(occurred::WorkerFailed& failure);

 private:
  // The restore of round `round` for start `start` ended: said, logged, then the warm start.
  void restored(std::uint64_t start, int attempt, const elastic::RestoreOutcome& outcome);
  void start_when_warm(int attempt);
  void start_now(int attempt);
  // A worker's failure before its end is known: who, where, when.
  elastic::WorkerFailure identity(const WorkerProcess& w) const;
  // A failure found outside a worker's end (a hung rank), its kind still to find: dispatched.
  void failed(elastic::WorkerFailure failure);
  void ended(WorkerProcess& w, int status);
  // AllEnded, once a round: when no worker is left, none is still to start, and no hung rank's
  // failure waits for its stacks (hangs/hang_response.hpp's collecting()).
  void check_all_ended();
  void add_kind(elastic::WorkerFailure& f, const WorkerProcess* w, bool stopped_by_ddprun,
                bool after_another_failure);

  Context c_;
  WorkerGroup group_;
  asio::steady_timer grace_timer_;
  // The dying gasp under way: its signal, the ranks signalled and when (seconds since the epoch,
  // the kernel's coarse clock that stamps files; and the steady clock for its length).
  struct Gasp {
    int signal = 0;
    std::vector<int> ranks;
    double since = 0;
    std::chrono::steady_clock::time_point at;
  };
  std::optional<Gasp> gasp_;
  asio::steady_timer gasp_timer_;
  HangWatch* hangs_ = nullptr;
  CommitWatch* commits_ = nullptr;
  std::optional<elastic::FenceDeadlines> fence_;
  bool open_ = false;                 // workers were started and their round has not ended yet
  bool starting_ = false;             // waiting for the snapshot restore or the warm interpreter
  std::uint64_t starts_ = 0;          // start() calls: a restore's end for an older one is stale
  bool said_not_replicated_ = false;  // the line that a round is not replicated, said once
  bool all_ended_ = false;            // AllEnded was dispatched for this round
  long long oom_kills_at_start_ = 0;  // the cgroup's memory_events() when the round's workers started
  std::optional<long long> kernel_oom_kills_at_start_;  // the host's, then (containment.hpp)
};

}  // namespace ddprun::launcher
