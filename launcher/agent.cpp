// The agent's loop: an occurrence, the supervisor's transition, its actions; the workers' start
// and the exit. The state is agent_impl.hpp's; what the watched parts tell it, agent_hooks.cpp.
#include "agent.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "agent_impl.hpp"

#include "ddprun/clocks.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/failure_text.hpp"
#include "ddprun/system.hpp"
#include "hangs/hang_watch.hpp"
#include "health_check.hpp"
#include "occurrence.hpp"
#include "report/event_records.hpp"
#include "output/output_writer.hpp"
#include "process/signal_channel.hpp"
#include "report/failure_report.hpp"
#include "report/goodput_ledger.hpp"
#include "report/job_exit.hpp"
#include "report/node_wait.hpp"
#include "report/status_server.hpp"
#include "round_workers.hpp"
#include "snapshots/snapshot_handover.hpp"

namespace ddprun::launcher {

// At exit, how long ddprun waits for its console and log files to take what is queued.
constexpr std::chrono::seconds kExitFlushLimit{10};
// The longest ddprun waits at its exit for its last words to the rendezvous (a leave, a
// quarantine's reason) to be written.
constexpr std::chrono::seconds kLeaveFlushLimit{2};

Agent::Impl::Impl(asio::io_context& io, config::LaunchConfig config, std::map<std::string, std::string> environ,
                  std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, Containment& containment,
                  SnapshotDir& snapshots, elastic::SnapshotReplication* replication, RunPaths paths)
    : io_(io),
      config_(std::move(config)),
      environ_(std::move(environ)),
      rendezvous_(std::move(rendezvous)),
      paths_(std::move(paths)),
      guard_(guard),
      snapshots_(snapshots),
      replication_(replication),
      python_(config_.runs_python() ? config::python_interpreter(environ_) : config::PythonInterpreter{}),
      settings_{host_name(), config_.rdzv_id, config_.max_restarts},
      workers_({io_, config_, environ_, python_, paths_, settings_, phase_, node_, guard_, containment, events_,
                [this](Occurrence o) { dispatch(std::move(o)); }, replication}),
      health_({io_, config_, environ_, guard_, containment,
               [this](HealthCheckReport report) { health_check_ended(std::move(report)); }}),
      signals_(io, signal_handlers()),
      left_timer_(io) {
  if (!config_.event_log.empty()) events_ = EventLog(config_.event_log, settings_.host);
  if (config_.status_port >= 0) {
    status_ = std::make_unique<StatusServer>(config_.status_addr, config_.status_port);
    say(fmt::format("ddprun: status at http://{}:{}/status (health: /healthz)\n", config_.status_addr,
                    status_->port()));
  }
  // py-spy is looked for whatever the program: a worker runs Python when its process tree
  // does (a shell script that runs python3), which is found only when it hangs.
  const std::string python = config_.runs_python()      ? python_.program
                             : config_.python_workers() ? config_.program
                                                        : config::python_interpreter(environ_).program;
  // Beats are watched always: the goodput ledger counts progress by them (and the live view,
  // --warm_start=auto's wait for the first).
  hangs_ = std::make_unique<HangWatch>(io_, config_, environ_, workers_.group(), paths_, python, true,
                                       guard.take_inotify(), hang_hooks());
  workers_.watch_hangs(*hangs_);
  if (!snapshots_.path().empty()) {
    commits_ = std::make_unique<CommitWatch>(io_, guard.take_snapshot_inotify(), snapshots_.path(), commit_hooks());
    workers_.watch_commits(commits_.get());
  }
  // A worker waiting on a slow console is not hung.
  workers_.group().output_paused = [this](int local_rank, bool paused) {
    hangs_->watchdog().output_paused(local_rank, paused);
    publish_status();
  };
  workers_.group().output_progress = [this](int local_rank, std::optional<long long> step) {
    hangs_->watchdog().progress(local_rank, step);
  };
  if (config_.chaos.on()) {
    say(chaos_start_line(config_.chaos, config_.multi_node()) + "\n");
    chaos_ = std::make_unique<ChaosInjector>(io_, config_.chaos, config_.nproc_per_node, started_at_, chaos_hooks());
  }
}

int Agent::Impl::run() {
  // Started here, after main() blocked the signals: its thread inherits the mask.
  OutputWriter::Limits limits;
  limits.stall_timeout = std::chrono::duration_cast<OutputWriter::Clock::duration>(
      std::chrono::duration<double>(config_.output_stall_timeout));
  writers_ = std::make_unique<OutputWriters>(limits);
  writers_->install();
  signals_.start();
  elastic::Rendezvous::Handlers handlers;
  handlers.start_round = [this](const elastic::RoundAssignment& a) { dispatch(occurred::RoundStarted{a}); };
  handlers.stop_round = [this](elastic::StopReason reason, const std::string& why) {
    std::string text = why.empty() ? elastic::to_string(reason) : why;
    // A failure elsewhere leaves this node's workers holding the step it happened in: they may
    // gasp (--snapshot_signal). A change of members or a shutdown is no failure.
    if (reason == elastic::StopReason::kWorkerFailed || reason == elastic::StopReason::kNodeLost) {
      return dispatch(occurred::PeerFailed{std::move(text)});
    }
    dispatch(occurred::StopRequested{std::move(text)});
  };
  handlers.say = [](const std::string& line) { say(line); };
  handlers.spare = [this](int place, const std::string& why) {
    // Said once, when the node becomes a spare; a new place in the queue is only logged.
    if (node_.spare_place == 0) {
      say(fmt::format("ddprun: this node is a hot spare: {}\n", why));
      workers_.group().warm_start().waits_as_spare();
    }
    node_.spare_place = place;
    events_.write(records::spare(place, why));
    publish_status();
  };
  handlers.membership = [this](const elastic::JobMembership& m) {
    node_.job_spares = m.spares;
    log_quarantined(m.quarantined);
    publish_status();
  };
  handlers.finish = [this](const elastic::JobOutcome& outcome) { dispatch(occurred::JobFinished{outcome}); };
  handlers.fence = [this](const std::string& why) { dispatch(occurred::Fenced{why}); };
  handlers.connection_opened = [this](int fd) { guard_.hold_connection(fd); };
  handlers.connection_closed = [this](int fd) { guard_.drop_connection(fd); };
  handlers.fence_moved = [this](std::optional<elastic::FenceDeadlines> at) {
    guard_.fence_at(at ? std::optional(at->backstop) : std::nullopt);
    workers_.fence_moved(at);
  };
  handlers_ = std::move(handlers);
  events_.write(records::started(config_));
  begin(first_transition());
  io_.run();
  // A console that takes nothing (a stalled pipe) does not keep ddprun from exiting.
  writers_->finish(kExitFlushLimit);
  hangs_.reset();  // the watchdog's timer pipe lives in the private folder
  if (!paths_.private_root.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(paths_.private_root, ignored);
  }
  return exit_code_;
}

void Agent::Impl::dispatch(Occurrence occurrence) {
  queue_.push_back(std::move(occurrence));
  drain();
}

void Agent::Impl::begin(const Transition& first) {
  phase_ = first.next;
  dispatching_ = true;
  for (Action action : first.actions) perform(action, nullptr);
  dispatching_ = false;
  drain();
}

void Agent::Impl::drain() {
  if (dispatching_) return;
  dispatching_ = true;
  while (!queue_.empty()) {
    Occurrence o = std::move(queue_.front());
    queue_.pop_front();
    handle(o);
  }
  dispatching_ = false;
  publish_status();
}

void Agent::Impl::handle(Occurrence& o) {
  std::visit([this](auto& e) { note(e); }, o);
  const Transition t = next_transition(phase_, event_of(o), supervision_);
  phase_ = t.next;
  for (Action action : t.actions) perform(action, &o);
}

void Agent::Impl::note(const occurred::ShutdownSignal& e) {
  goodput_.stopped(monotonic_seconds());
  if (shutdown_signal_ == 0) shutdown_signal_ = e.signal;
}

void Agent::Impl::note(const occurred::HealthCheckFailed& e) {
  health_failure_ = e.report;
  outcome_ = health_check_quarantine(e.report, settings_.host, node_.round);
}

void Agent::Impl::note(const occurred::RoundStarted& e) {
  if (node_.spare_place > 0) say(fmt::format("ddprun: this spare joins round {}\n", e.assignment.round));
  node_.spare_place = 0;
  node_.round = e.assignment;
  node_.round_assigned = true;
  events_.set_round(node_.round.group_rank, node_.attempts_started);
  log_quarantined(node_.round.quarantined);
  events_.write(records::round_started(node_.round));
}

void Agent::Impl::note(const occurred::Fenced& e) {
  goodput_.stopped(monotonic_seconds());
  if (std::exchange(fenced_, true)) return;  // the launcher's own, then the rendezvous's
  events_.write(records::stop_requested(node_.round.round, e.why));
}

void Agent::Impl::note(const occurred::StopRequested& e) {
  goodput_.stopped(monotonic_seconds());
  stop_requested(e.why);
}

void Agent::Impl::note(const occurred::PeerFailed& e) {
  goodput_.failure(monotonic_seconds(), kAnotherNode);  // unless this node's own failure came first
  stop_requested(e.why);
}

void Agent::Impl::stop_requested(const std::string& why) {
  events_.write(records::stop_requested(node_.round.round, why));
  if (is_up(phase_)) say(fmt::format("ddprun: stopping workers: {}\n", why));
  if (phase_ == Phase::kWaitingForRound && !workers_.group().workers().empty() && !fenced_) {
    say(fmt::format("ddprun: the round ended on another node: {}\n", why));  // ours had succeeded
  }
}

GaspEnd Agent::Impl::gasp_end(const Occurrence& o) {
  if (const auto* ended = std::get_if<occurred::GaspEnded>(&o)) return ended->how;
  switch (event_of(o)) {
    case Event::kAllEnded: return GaspEnd::kWorkersEnded;
    case Event::kShutdownSignal: return GaspEnd::kShutdownSignal;
    case Event::kJobFinished: return GaspEnd::kJobFinished;
    case Event::kFenced: return GaspEnd::kFenced;
    default: return GaspEnd::kGracePassed;
  }
}

void Agent::Impl::perform(Action action, Occurrence* occurrence) {
  auto* o = occurrence != nullptr ? std::get_if<occurred::WorkerFailed>(occurrence) : nullptr;
  switch (action) {
    case Action::kRunHealthCheck: run_health_check(); break;
    case Action::kStopHealthCheck: health_.stop(); break;
    case Action::kJoinRendezvous: rendezvous_->join(std::move(handlers_)); break;
    case Action::kStartWorkers: start_workers(); break;
    case Action::kCancelStart: workers_.cancel_start(); break;
    case Action::kReportFirstFailure:
      workers_.classify(*o);
      goodput_.failure(failure_time(o->failure), o->failure.kind.name(), chaos_ && chaos_->hit());
      say(fmt::format("ddprun: rank {} (local rank {}) {}; stopping the other workers\n", o->failure.rank,
                      o->failure.local_rank, o->failure.hung ? "hung" : "failed: " + describe_end(o->failure)));
      rendezvous_->worker_failed(node_.round.round, o->failure);
      break;
    case Action::kRecordFailure:
      workers_.classify(*o);
      further_failures_.push_back(o->failure);
      break;
    case Action::kNoteFailure: workers_.classify(*o); break;
    case Action::kTerminateWorkers:
      workers_.group().signal(shutdown_signal_ != 0 ? shutdown_signal_ : SIGTERM);
      if (chaos_) chaos_->release();  // a worker it stopped takes its SIGTERM
      break;
    case Action::kArmGraceTimer: workers_.arm_grace(config_.shutdown_timeout); break;
    case Action::kKillWorkers: workers_.group().signal(SIGKILL); break;
    case Action::kGasp: workers_.gasp(config_.snapshot_signal, config_.snapshot_grace); break;
    case Action::kEndGasp:
      workers_.end_gasp(occurrence != nullptr ? gasp_end(*occurrence) : GaspEnd::kGracePassed, shutdown_signal_);
      break;
    case Action::kReportStopped:
      workers_.end_round();
      rendezvous_->workers_stopped(node_.round.round, std::exchange(further_failures_, {}));
      break;
    case Action::kReportSucceeded:
      goodput_.stopped(monotonic_seconds());
      workers_.end_round();
      rendezvous_->workers_succeeded(node_.round.round);
      node_.done_round = node_.round.round;
      if (node_.round.group_world_size > 1) say(done_waiting_line(node_.round));
      break;
    case Action::kLeaveRendezvous:
      guard_.fence_at(std::nullopt);  // leaving on a signal: the workers get their grace
      rendezvous_->leave(shutdown_signal_);
      break;
    case Action::kLeaveQuarantined:
      guard_.fence_at(std::nullopt);
      rendezvous_->leave_quarantined(quarantine_reason(*health_failure_));
      break;
    case Action::kExit: exit_job(); break;
  }
}

void Agent::Impl::start_workers() {
  // attempt_N: this node's N-th start of its workers (rounds are numbered job-wide).
  attempt_ = node_.attempts_started++;
  events_.set_round(node_.round.group_rank, attempt_);
  if (node_.round.restart_count > 0 && announced_restarts_.insert(node_.round.restart_count).second) {
    say(restart_announcement(node_.round, config_.max_restarts));
    events_.write(records::restart(node_.round, config_.max_restarts));
  }
  further_failures_.clear();
  goodput_.workers_started(monotonic_seconds(), config_.nproc_per_node);
  samples_.workers_started(monotonic_seconds());
  workers_.start(attempt_);
  if (chaos_) chaos_->workers_started(node_.round.group_rank, rendezvous_->hosts_server());
}

double Agent::Impl::failure_time(const elastic::WorkerFailure& f) const {
  std::optional<double> last;
  for (int r = 0; f.hung && r < config_.nproc_per_node; ++r) {
    if (const auto at = hangs_->watchdog().policy().last_beat(r)) last = std::max(last.value_or(*at), *at);
  }
  return last.value_or(monotonic_seconds());
}

void Agent::Impl::exit_job() {
  workers_.end_round();  // one not reported: stopped by a signal or by the job's end
  signals_.close();
  chaos_.reset();  // no fault after the end
  log_quarantined(outcome_.quarantined);
  const HealthCheckReport* health = health_failure_ ? &*health_failure_ : nullptr;
  const JobExit e = job_exit(outcome_, shutdown_signal_, config_.program, health);
  exit_code_ = e.exit_code;
  if (!e.console.empty()) say(e.console);
  if (e.root_cause) node_.last_failure = e.root_cause;
  if (commits_) commits_->stop();
  const SnapshotsLeft snapshots = snapshots_.finish(exit_code_ == 0);  // the workers are gone
  if (!snapshots.line.empty()) say(snapshots.line);
  goodput_.stopped(monotonic_seconds());
  const GoodputFigures goodput = goodput_.figures(monotonic_seconds());
  if (node_.attempts_started > 0) {
    // Said where there is a figure: a program whose progress ddprun cannot see stays quiet.
    if (goodput.ett) say("ddprun: " + goodput_text(goodput) + "\n");
    events_.write(goodput_record(goodput, "exit"));
  }
  const std::string error = record_exit(events_, config_, outcome_, exit_code_, shutdown_signal_,
                                        std::max(attempt_, 0), health, snapshots.kept ? snapshots.kept->path : "",
                                        node_.attempts_started > 0 ? goodput_json(goodput) : nlohmann::json());
  if (!error.empty()) say("ddprun: " + error + "\n");
  status_.reset();
  // The loop runs on until the rendezvous has written its last words (a leave and the
  // quarantine's reason, which the coordinator would otherwise see as a lost connection).
  left_timer_.expires_after(kLeaveFlushLimit);
  left_timer_.async_wait([this](std::error_code ec) {
    if (!ec) io_.stop();
  });
  rendezvous_->when_left([this] { io_.stop(); });
}

Agent::Agent(asio::io_context& io, config::LaunchConfig config, std::map<std::string, std::string> environ,
             std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, Containment& containment,
             SnapshotDir& snapshots, elastic::SnapshotReplication* replication, RunPaths paths)
    : impl_(std::make_unique<Impl>(io, std::move(config), std::move(environ), std::move(rendezvous), guard, containment,
                                   snapshots, replication, std::move(paths))) {}

Agent::~Agent() = default;

void Agent::block_signals(bool debug) { SignalChannel::block_signals(debug); }

int Agent::run() { return impl_->run(); }

}  // namespace ddprun::launcher
