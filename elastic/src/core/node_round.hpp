// One node's side of the job's rounds, as a pure state machine: events in (the coordinator's
// messages, the launcher's reports about its workers, the coordinator lost or the job ended),
// actions out (start or stop the workers, open or close the round's store, report to the
// coordinator, finish). No I/O: NodeRendezvous (node_rendezvous.hpp) carries the actions out,
// and the backends (tcp/, etcd/) only move messages. The coordinator's side is JobCoordinator.
//
// States:
//   joining    not yet in the job (connecting, authenticating, registering)
//   idle       in the job, no workers: before the first round, between rounds
//   running    the round's workers run
//   stopping   the workers are being stopped (a failure here, a stop from the coordinator, the
//              job ending or the coordinator lost); the launcher's workers_stopped() ends it
//   succeeded  every local worker exited 0; the round's store goes on serving the other nodes
//              until the job finishes or the round is stopped anyway
//   done       the job has ended for this node; nothing more happens
//
// Two rules hold in every state: the job's end is told to the launcher only while none of its
// workers run (a job that ends during a round stops the workers first, and the first outcome
// decided is the one told), and every round's store is closed (store_round_ended) before the
// coordinator can hear that the round is over for this node.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

class NodeRound {
 public:
  enum class State { kJoining, kIdle, kRunning, kStopping, kSucceeded, kDone };

  // The actions, carried out in the order given.
  struct StartWorkers {  // the store serves the round (if this node hosts it), then start_round
    RoundAssignment assignment;
  };
  struct StopWorkers {  // stop_round
    StopReason reason;
    std::string why;
  };
  struct EndStoreRound {};  // MasterPort::round_ended
  struct Report {           // to the coordinator, as the wire protocol's message
    nlohmann::json message;
  };
  struct Finish {  // the job ended for this node: release what the backend holds, then finish
    JobOutcome outcome;
  };
  struct Leave {  // the launcher is stopping on `signal`: tell the job, say nothing to the launcher
    int signal;
    std::string quarantined;  // or, signal 0, its health check found the node unfit: why
  };
  struct WaitAsSpare {  // the round is full: tell the launcher it waits as a hot spare
    int place;
    std::string why;
  };
  using Action = std::variant<StartWorkers, StopWorkers, EndStoreRound, Report, Finish, Leave, WaitAsSpare>;
  using Actions = std::vector<Action>;

  State state() const { return state_; }
  int round() const { return round_; }
  int restarts() const { return restarts_; }  // job-wide restarts as of the last assignment
  bool had_round() const { return had_round_; }

  // The backend is in the job (connected and authenticated, or registered): joining -> idle.
  Actions joined();
  // The backend lost its way into the job before the first round and tries again: idle ->
  // joining (tcp/: the host closed the connection to make room, or restarted).
  Actions rejoining();

  // The coordinator's messages.
  Actions assign(const RoundAssignment& assignment);
  Actions stop(int round, StopReason reason, const std::string& why);
  // The job ended for this node: the coordinator's finish, or the rendezvous failed.
  Actions end(JobOutcome outcome);
  // The coordinator is gone and another takes over (etcd/: the leader's key is gone): the
  // round cannot go on, and the next coordinator starts the next one.
  Actions coordinator_lost(const std::string& why);
  // The coordinator left this node out of a full round: it waits as a hot spare. Only while it
  // has no workers (idle); a past round's word is stale once a round has been assigned.
  Actions spare(int place, const std::string& why);

  // The launcher's reports (Rendezvous's calls of the same names).
  Actions worker_failed(int round, const WorkerFailure& failure);
  Actions workers_stopped(int round, const std::vector<WorkerFailure>& failures);
  Actions workers_succeeded(int round);
  Actions leave(int signal, std::string quarantined = {});

 private:
  Actions start(const RoundAssignment& assignment, Actions actions);

  State state_ = State::kJoining;
  int round_ = 0;
  int restarts_ = 0;
  bool had_round_ = false;
  std::optional<JobOutcome> end_after_stop_;          // the job ended while the workers stop
  std::optional<RoundAssignment> assign_after_stop_;  // a new coordinator's round, likewise
  std::optional<int> stopped_before_start_;          // that round, ended before it started
};

const char* to_string(NodeRound::State state);  // "joining", "idle", ...

}  // namespace ddprun::elastic
