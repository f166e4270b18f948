// The launcher's view of the job: who is in each round, which ranks this node's workers get,
// and when to stop, restart or finish.
//
// One round: the rendezvous calls start_round(assignment); the launcher starts its workers.
// If one of them fails, the launcher calls worker_failed() at once (so other nodes hear of
// it without waiting for a collective to time out), stops its other workers, then calls
// workers_stopped(). If the rendezvous calls stop_round() (a failure elsewhere, a node lost
// or joining), the launcher stops its workers and calls workers_stopped(). The rendezvous
// then either starts the next round (job-wide restart budget permitting) or calls finish().
// When all of this node's workers succeed the launcher calls workers_succeeded(); finish()
// follows once every node has succeeded (the exit barrier), or, if a worker elsewhere fails
// first, start_round of a new round that restarts the workers here too.
//
// finish() is only called while none of this node's workers run: if the job ends during a
// round (the rendezvous host was lost or stopped), stop_round(kShutdown) comes first and
// finish() follows the launcher's workers_stopped().
//
// Every handler but say is invoked from the launcher's event loop (asio::io_context), never
// from inside one of the calls below.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/failure_kind.hpp"
#include "ddprun/rendezvous_config.hpp"

namespace asio {
class io_context;
}

namespace ddprun::elastic {

// One worker that ended on its own with a failure.
struct WorkerFailure {
  int rank = -1;
  int local_rank = -1;
  int group_rank = -1;
  std::string host;
  int pid = 0;
  int exit_code = 0;          // the worker's exit status, or 128+signal when signalled
  int signal = 0;             // the signal that killed it, 0 when it exited
  bool signal_from_outside = false;  // killed by a signal ddprun did not send
  bool hung = false;          // made no progress within --hang_timeout (exit_code is kHung)
  std::string message;        // from the worker's error file, if it wrote one
  std::string traceback;      // the end of the error file's traceback, if any (root cause only in a JobOutcome)
  std::string error_file;     // the error file, when it outlives ddprun (a log folder); else empty
  double timestamp = 0;       // seconds since the epoch when it ended (or its error-file time)
  // What kind of failure it was (config/'s vocabulary, ddprun/failure_kind.hpp, or a
  // --failure_rules kind); whether running the same code again may fix it; the one line the
  // kind rests on; the Python exception's type and where it was raised, when seen (the restart
  // policy compares them between rounds).
  FailureKindName kind;
  bool retryable = true;
  std::string cause;
  std::string exception;
  std::string location;
  long long step = -1;        // the last step its rank reported; -1: unknown
  bool progressed = false;    // its node's workers made progress (beats, steps) in this round
};

// A node the coordinator left out of the job for good: its workers were the root cause of
// --rdzv_conf quarantine_after hardware-like failures within quarantine_window (its launcher exits
// exit_code::kQuarantined, so that the scheduler can drain the host).
struct QuarantinedNode {
  std::string node;  // "hostname (addr)"
  std::string why;   // one clause: the failures counted
};

// Why the coordinator restarted the workers, as fields: describe_restart (failure_text.hpp)
// says it; no node parses the text again.
struct RestartReason {
  int restart = 0;           // which restart, as --max_restarts counts them (within the window); 0: none
  int max_restarts = 0;      // --max_restarts
  double window = 0;         // --restart_window, seconds; 0: none
  std::string after;         // the root cause (describe_kind)
  int no_progress = 0;       // failed rounds in a row with no progress; 0: the round progressed
  int crash_loop_limit = 0;  // --crash_loop_limit; 0: none
  double waited = 0;         // the crash-loop backoff it waited, seconds
  std::vector<std::string> nodes;  // what quarantine found of the root cause's node, a clause each
  bool operator==(const RestartReason& o) const {
    return restart == o.restart && max_restarts == o.max_restarts && window == o.window && after == o.after &&
           no_progress == o.no_progress && crash_loop_limit == o.crash_loop_limit && waited == o.waited &&
           nodes == o.nodes;
  }
};

// Where a node's snapshot replicator listens (ddprun/snapshot_replication.hpp).
struct SnapshotPeer {
  std::string node;  // the replicator's id, random, unique in the job
  std::string addr;  // the node's advertised address
  int port = 0;
  bool operator==(const SnapshotPeer& o) const { return node == o.node && addr == o.addr && port == o.port; }
};

// The most nodes whose snapshot folders a round replicates: each round's assignment lists them
// all, once per node; past it a round replicates nothing (its nodes say so).
inline constexpr int kMaxSnapshotRing = 64;

// What one node needs to start its workers for a round.
struct RoundAssignment {
  int round = 0;              // increases by one with every new round
  int restart_count = 0;      // job-wide failure restarts so far (TORCHELASTIC_RESTART_COUNT)
  int group_rank = 0;         // this node's rank (GROUP_RANK)
  int group_world_size = 1;   // nodes in the round (GROUP_WORLD_SIZE)
  int base_rank = 0;          // global rank of this node's local rank 0
  int world_size = 1;         // workers in the round (WORLD_SIZE)
  std::string master_addr;    // host of global rank 0
  int master_port = 0;        // free port picked there
  std::string run_id;
  bool agent_store = false;   // the launcher there serves the workers' store at master_port
  // A restart: why the coordinator restarted, and how long it waited first (the crash-loop
  // backoff, seconds). None (restart 0) and 0 for the first round and membership changes.
  RestartReason restart_reason;
  double backoff = 0;
  std::vector<QuarantinedNode> quarantined;  // every node quarantined in the job so far, in order
  // The round's snapshot replicators in group-rank order, the ring their copies go around;
  // empty when a node of the round has none or the round has more than kMaxSnapshotRing nodes.
  std::vector<SnapshotPeer> snapshot_peers;
};

// Why a round ends early: a worker failed (here or on another node; uses the restart budget),
// a node was lost or left, a node joined and is admitted in the next round, or the job is
// ending without a new round (the rendezvous host was lost or stopped).
enum class StopReason { kWorkerFailed, kNodeLost, kMembershipChange, kShutdown };
const char* to_string(StopReason reason);  // "worker_failed", "node_lost", ...

// How the job ended, the same on every node.
struct JobOutcome {
  int exit_code = 0;                    // 0, the root cause's code, or ddprun::exit_code::kRendezvous
  std::vector<WorkerFailure> failures;  // root cause (first in time) first; empty on success
  std::string error;                    // set when the rendezvous itself failed
  int restarts = 0;                     // restarts used
  // Why a failed job was not restarted, when the restart policy decided so (one line, e.g.
  // "not restarting: ..." or "crash loop: ..."); empty when --max_restarts was simply spent.
  std::string stop_reason;
  // Whether running the job again may help (for a requeue script): a failure whose root cause's
  // kind is retryable and which the policy did not judge hopeless (a crash loop, the same
  // exception twice), or a rendezvous error; false on success.
  bool retryable = false;
  std::vector<QuarantinedNode> quarantined;  // every node quarantined in the job, in order
};

// The job's nodes beside those of the round, as the node that runs the coordinator knows them
// (the TCP host, the etcd leader).
// A node's fence (core/fence.hpp), as it stands after the coordinator last acknowledged it.
struct FenceDeadlines {
  // The node kills its workers here and starts none at or after it (the launcher, at each fork).
  std::chrono::steady_clock::time_point fence;
  // Half a margin later: a process outside the launcher's loop kills them here unless the fence
  // moved first (the orphan guard: the backstop for a launcher that is stopped or stalls).
  std::chrono::steady_clock::time_point backstop;
};

struct JobMembership {
  std::vector<std::string> spares;  // the hot spares, the next admitted first
  std::vector<QuarantinedNode> quarantined;
};

class Rendezvous {
 public:
  struct Handlers {
    std::function<void(const RoundAssignment&)> start_round;
    std::function<void(StopReason, const std::string& why)> stop_round;
    std::function<void(const JobOutcome&)> finish;
    // The coordinator may count this node lost at any moment and give its ranks to others
    // (fencing, core/fence.hpp): kill this node's workers now, SIGKILL without a grace period.
    // stop_round and finish follow, as when the rendezvous fails. Unset: stop_round's stop.
    std::function<void(const std::string& why)> fence;
    // Where this node's fence stands: for the launcher's forks (none at or after `fence`) and for
    // a process outside its loop, which kills the workers at `backstop` unless it is moved first;
    // nullopt: no fence any more. Called each time it moves (about every heartbeat_timeout/3).
    // Not after leave(): the launcher drops its backstop itself there. Unset: no backstop.
    std::function<void(std::optional<FenceDeadlines> at)> fence_moved;
    // This node's connection to its coordinator (TCP) opened, as descriptor `fd`, and later
    // closed here: a process that outlives the launcher holds a copy in between (the orphan
    // guard), so that the coordinator, which counts a node lost at once when its connection ends,
    // cannot see it end when the launcher is killed before the workers are. Called at once, on
    // the loop (`fd` is open during connection_opened), whatever else was left. Unset: nothing.
    std::function<void(int fd)> connection_opened;
    std::function<void(int fd)> connection_closed;
    // This node has joined (authenticated) but the round is full: it waits as hot spare number
    // `place` (1: the next one admitted, the earliest joined), starts no workers, and takes the
    // place of a lost node in the next round (start_round). Unset: nothing is said.
    std::function<void(int place, const std::string& why)> spare;
    // Only on the node that runs the job's coordinator (the TCP host, the etcd leader): its
    // spares or quarantined nodes changed. Unset: nothing is said.
    std::function<void(const JobMembership&)> membership;
    // A line of ddprun's own about the rendezvous (ending in '\n'), for the launcher's
    // console; called at once, on the loop. Unset: nothing is said (elastic/ writes nowhere of
    // its own).
    std::function<void(const std::string& line)> say;
  };
  virtual ~Rendezvous() = default;

  // Joins the job; start_round (or finish, on a rendezvous error) follows.
  virtual void join(Handlers handlers) = 0;
  // A local worker of `round` failed; called once per round, at the first failure.
  virtual void worker_failed(int round, const WorkerFailure& failure) = 0;
  // Every local worker of `round` has ended after a failure or a stop_round; `failures` holds
  // any further failures seen while stopping (not the one already given to worker_failed).
  virtual void workers_stopped(int round, const std::vector<WorkerFailure>& failures) = 0;
  // Every local worker of `round` exited 0.
  virtual void workers_succeeded(int round) = 0;
  // ddprun is stopping because it received `signal`; no more handlers are called.
  virtual void leave(int signal) = 0;
  // This node's own health check (--health_check) found it unfit, between rounds (its workers
  // have ended; workers_stopped() not called): it leaves the job for good, and the job counts it
  // quarantined for `why` and goes on without it where it can, as after the coordinator's own
  // quarantine. No more handlers are called.
  virtual void leave_quarantined(const std::string& why) = 0;
  // After leave() or leave_quarantined(): calls `done` on the loop once what they said has been
  // written (ddprun keeps its loop running until then: the quarantine's reason must reach the
  // coordinator); at once where nothing is in flight.
  virtual void when_left(std::function<void()> done) { done(); }
  // Whether this process serves the rendezvous (TCP's host, whatever its group rank): its loss
  // ends the job. Known once join() started; false for etcd and one node.
  virtual bool hosts_server() const { return false; }
};

// The rendezvous for `config`: in-process for a single-node job (--nnodes=1), otherwise over
// TCP, hosting the server in this process when hosts_rendezvous() says so, or in etcd
// (--rdzv_backend=etcd, etcd_rendezvous.hpp). Does no I/O itself;
// join() starts it. Throws RendezvousConfigError when validate(config) does.
std::unique_ptr<Rendezvous> make_rendezvous(asio::io_context& io, const RendezvousConfig& config);

}  // namespace ddprun::elastic
