// Agent::Impl, the agent's state and its parts, shared by the files that define its members:
// agent.cpp (the loop: occurrences, the supervisor's transitions, their actions, the exit) and
// agent_hooks.cpp (what the parts it watches tell it: hangs and beats, the snapshot folder's
// commits, signals, the health check, the live view). Included by those files only.
#pragma once

#include <signal.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "agent.hpp"
#include "chaos/chaos_injector.hpp"
#include "ddprun/clocks.hpp"
#include "ddprun/exit_codes.hpp"
#include "hangs/hang_watch.hpp"
#include "health_check.hpp"
#include "occurrence.hpp"
#include "output/output_writer.hpp"
#include "process/signal_channel.hpp"
#include "report/goodput_ledger.hpp"
#include "report/progress_samples.hpp"
#include "report/status_server.hpp"
#include "round_workers.hpp"
#include "snapshots/commit_watch.hpp"

namespace ddprun::launcher {

class Agent::Impl {
 public:
  Impl(asio::io_context& io, config::LaunchConfig config, std::map<std::string, std::string> environ,
       std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, Containment& containment,
       SnapshotDir& snapshots, elastic::SnapshotReplication* replication, RunPaths paths);


  int run();

 private:
  // --- the loop: an occurrence, the supervisor's transition, its actions ---------------------

  // Events raised while an action runs (a worker that could not start) wait their turn.
  void dispatch(Occurrence occurrence);

  // The supervisor's first phase and its actions (the health check before the first join).
  void begin(const Transition& first);

  void drain();

  void handle(Occurrence& o);

  // What an occurrence changes before the supervisor's transition.
  template <typename Other>
  void note(const Other&) {}
  void note(const occurred::ShutdownSignal& e);
  void note(const occurred::JobFinished& e) { outcome_ = e.outcome; }
  void note(const occurred::HealthCheckFailed& e);
  void note(const occurred::RoundStarted& e);
  void note(const occurred::Fenced& e);
  void note(const occurred::StopRequested& e);
  void note(const occurred::PeerFailed& e);
  void stop_requested(const std::string& why);

  // What ended a dying gasp: what its GaspEnded says, or the event that cut it short.
  static GaspEnd gasp_end(const Occurrence& o);

  // `occurrence`: the one whose transition asked for `action`; null for the first transition's.
  void perform(Action action, Occurrence* occurrence);

  // --- workers ------------------------------------------------------------------------------

  void start_workers();

  // When a failure stopped progress: a hang's at the last beat of this node's ranks, not at its
  // detection (the timeout after it).
  double failure_time(const elastic::WorkerFailure& f) const;

  // --- the health check -----------------------------------------------------------------------

  void run_health_check();

  void health_check_ended(HealthCheckReport report);

  // Nodes quarantined since the last word of the coordinator: logged once each, on every node.
  void log_quarantined(const std::vector<elastic::QuarantinedNode>& all);

  void exit_job();

  // --- hangs, the live view, signals --------------------------------------------------------

  HangWatch::Hooks hang_hooks();

  // The snapshot folder's watch: the workers it looks at, what it says and logs.
  CommitWatch::Hooks commit_hooks();

  void publish_status();

  void shut_down(int sig);

  SignalChannel::Handlers signal_handlers();
  ChaosInjector::Hooks chaos_hooks();

  asio::io_context& io_;
  config::LaunchConfig config_;
  std::map<std::string, std::string> environ_;
  std::unique_ptr<elastic::Rendezvous> rendezvous_;
  RunPaths paths_;
  OrphanGuard& guard_;  // also the fence's backstop (orphan_guard.hpp)
  SnapshotDir& snapshots_;  // DDPRUN_SNAPSHOT_DIR, finished at the exit
  elastic::SnapshotReplication* replication_;  // its copies on the other nodes; null: none
  bool fenced_ = false;  // the workers were fenced: the rendezvous's end follows
  config::PythonInterpreter python_;  // runs_python() only
  NodeSettings settings_;
  Supervision supervision_{config_.snapshot_signal != 0};  // what the configuration changes in the table
  EventLog events_;
  Phase phase_ = Phase::kWaitingForRound;
  NodeRecord node_;  // what the live view shows
  RoundWorkers workers_;
  HealthCheck health_;
  std::optional<HealthCheckReport> health_failure_;  // the check that made the node leave
  elastic::Rendezvous::Handlers handlers_;           // until the first join
  SignalChannel signals_;
  asio::steady_timer left_timer_;  // exit_job()'s bound on the wait for the rendezvous's last words
  std::unique_ptr<OutputWriters> writers_;
  std::unique_ptr<StatusServer> status_;
  std::unique_ptr<HangWatch> hangs_;
  std::unique_ptr<CommitWatch> commits_;  // the snapshot folder's committed files; none with --snapshot=off
  std::unique_ptr<ChaosInjector> chaos_;  // --chaos; none when off
  double started_at_ = monotonic_seconds();  // the agent's start: the ledger's and --chaos's zero
  GoodputLedger goodput_{started_at_, !snapshots_.path().empty()};
  ProgressSamples samples_;  // the event log's progress records

  int shutdown_signal_ = 0;       // the first shutdown signal received
  elastic::JobOutcome outcome_;   // the rendezvous's, once it ended the job
  std::set<int> announced_restarts_;
  int attempt_ = 0;               // this node's start of its workers now running
  std::vector<elastic::WorkerFailure> further_failures_;  // while stopping, for workers_stopped()
  std::deque<Occurrence> queue_;
  bool dispatching_ = false;
  int exit_code_ = exit_code::kInternal;
};

}  // namespace ddprun::launcher
