#include "agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <algorithm>
#include <set>
#include <utility>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <fmt/format.h>

#include "ddprun/exit_codes.hpp"
#include "ddprun/failure_text.hpp"
#include "ddprun/system.hpp"
#include "hangs/hang_watch.hpp"
#include "occurrence.hpp"
#include "report/event_records.hpp"
#include "output/output_writer.hpp"
#include "process/signal_channel.hpp"
#include "report/failure_report.hpp"
#include "report/job_exit.hpp"
#include "report/result_file.hpp"
#include "report/status_server.hpp"
#include "round_workers.hpp"

namespace ddprun::launcher {

// At exit, how long ddprun waits for its console and log files to take what is queued.
constexpr std::chrono::seconds kExitFlushLimit{10};

class Agent::Impl {
 public:
  Impl(asio::io_context& io, config::LaunchConfig config, std::map<std::string, std::string> environ,
       std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, Containment& containment,
       RunPaths paths)
      : io_(io),
        config_(std::move(config)),
        environ_(std::move(environ)),
        rendezvous_(std::move(rendezvous)),
        paths_(std::move(paths)),
        containment_(containment),
        guard_(guard),
        python_(config_.runs_python() ? config::python_interpreter(environ_) : config::PythonInterpreter{}),
        group_(io, config_, environ_, config_.worker_argv(python_.program), guard, containment, paths_),
        signals_(io, signal_handlers()),
        grace_timer_(io),
        settings_{host_name(), config_.rdzv_id, config_.max_restarts} {
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
    hangs_ = std::make_unique<HangWatch>(io_, config_, environ_, group_, paths_, python, status_ != nullptr,
                                         guard.take_inotify(), hang_hooks());
    workers_.watch_hangs(*hangs_);
    // A worker waiting on a slow console is not hung.
    group_.output_paused = [this](int local_rank, bool paused) {
      hangs_->watchdog().output_paused(local_rank, paused);
      publish_status();
    };
    group_.output_progress = [this](int local_rank, std::optional<long long> step) {
      hangs_->watchdog().progress(local_rank, step);
    };
  }

  int run() {
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
      dispatch(occurred::StopRequested{why.empty() ? elastic::to_string(reason) : why});
    };
    handlers.say = [](const std::string& line) { say(line); };
    handlers.spare = [this](int place, const std::string& why) {
      // Said once, when the node becomes a spare; a new place in the queue is only logged.
      if (node_.spare_place == 0) say(fmt::format("ddprun: this node is a hot spare: {}\n", why));
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
      fence_ = at;
    };
    events_.write(records::started(config_));
    rendezvous_->join(std::move(handlers));
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

 private:
  // --- the loop: an occurrence, the supervisor's transition, its actions ---------------------

  // Events raised while an action runs (a worker that could not start) wait their turn.
  void dispatch(Occurrence occurrence) {
    queue_.push_back(std::move(occurrence));
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

  void handle(Occurrence& o) {
    if (auto* failed = std::get_if<occurred::WorkerFailed>(&o); failed && fenced_by_guard(failed->failure)) {
      o = occurred::Fenced{
          "this launcher did not run (stopped or stalled) past its fence's deadline: its orphan guard killed the "
          "workers for it"};
      say("ddprun: " + std::get<occurred::Fenced>(o).why + "\n");
    }
    std::visit([this](auto& e) { note(e); }, o);
    const Transition t = next_transition(phase_, event_of(o), shutting_down_, job_finished_);
    if (std::holds_alternative<occurred::ShutdownSignal>(o)) shutting_down_ = true;
    phase_ = t.next;
    auto* failed = std::get_if<occurred::WorkerFailed>(&o);
    for (Action action : t.actions) perform(action, failed);
    if (failed) workers_.classify(*failed);  // a failure no action reported: its kind is still logged and counted
    if (waiting_for_zygote_ && phase_ != Phase::kRunning) stop_waiting_for_zygote();  // stopped before it started
    // Not while a hang's failures wait for their stacks: they are dispatched, then this runs.
    if ((phase_ == Phase::kRunning || phase_ == Phase::kStopping) && group_.alive_count() == 0 && !waiting_for_zygote_ &&
        !std::holds_alternative<occurred::AllEnded>(o) && !hangs_->response().collecting()) {
      dispatch(occurred::AllEnded{});
    }
  }

  // A worker SIGKILLed from outside once the fence's backstop deadline has passed: the orphan
  // guard fenced for this launcher (orphan_guard.hpp), which ran too late to do it itself. The
  // rendezvous's own fence comes next and ends the job here; it is no failure to report.
  bool fenced_by_guard(const elastic::WorkerFailure& f) const {
    return fence_ && std::chrono::steady_clock::now() >= fence_->backstop && f.signal == SIGKILL &&
           f.signal_from_outside;
  }

  // No worker is forked at or after the fence's deadline: the rendezvous checked it when the round
  // started, but a launcher stopped or stalled since then runs on past it, between two forks.
  std::optional<std::chrono::steady_clock::time_point> start_by() const {
    return fence_ ? std::optional(fence_->fence) : std::nullopt;
  }

  // What an occurrence changes before the supervisor's transition.
  template <typename Other>
  void note(const Other&) {}
  void note(const occurred::ShutdownSignal& e) {
    if (shutdown_signal_ == 0) shutdown_signal_ = e.signal;
  }
  void note(const occurred::JobFinished& e) {
    job_finished_ = true;
    outcome_ = e.outcome;
  }
  void note(const occurred::RoundStarted& e) {
    if (node_.spare_place > 0) say(fmt::format("ddprun: this spare joins round {}\n", e.assignment.round));
    node_.spare_place = 0;
    node_.round = e.assignment;
    node_.round_assigned = true;
    events_.set_round(node_.round.group_rank, node_.attempts_started);
    log_quarantined(node_.round.quarantined);
    events_.write(records::round_started(node_.round));
  }
  void note(const occurred::Fenced& e) {
    if (std::exchange(fenced_, true)) return;  // the launcher's own, then the rendezvous's
    events_.write(records::stop_requested(node_.round.round, e.why));
  }
  void note(const occurred::StopRequested& e) {
    events_.write(records::stop_requested(node_.round.round, e.why));
    if (phase_ == Phase::kRunning) say(fmt::format("ddprun: stopping workers: {}\n", e.why));
    if (phase_ == Phase::kWaitingForRound && !group_.workers().empty() && !fenced_) {
      say(fmt::format("ddprun: the round ended on another node: {}\n", e.why));  // ours had succeeded
    }
  }

  void perform(Action action, occurred::WorkerFailed* o) {
    switch (action) {
      case Action::kStartWorkers: start_workers(); break;
      case Action::kReportFirstFailure:
        workers_.classify(*o);
        say(fmt::format("ddprun: rank {} (local rank {}) {}; stopping the other workers\n", o->failure.rank,
                        o->failure.local_rank, o->failure.hung ? "hung" : "failed: " + describe_end(o->failure)));
        rendezvous_->worker_failed(node_.round.round, o->failure);
        break;
      case Action::kRecordFailure:
        workers_.classify(*o);
        further_failures_.push_back(o->failure);
        break;
      case Action::kTerminateWorkers: group_.signal(shutdown_signal_ != 0 ? shutdown_signal_ : SIGTERM); break;
      case Action::kArmGraceTimer: arm_grace_timer(); break;
      case Action::kKillWorkers: group_.signal(SIGKILL); break;
      case Action::kReportStopped:
        end_round();
        rendezvous_->workers_stopped(node_.round.round, std::exchange(further_failures_, {}));
        break;
      case Action::kReportSucceeded:
        end_round();
        rendezvous_->workers_succeeded(node_.round.round);
        break;
      case Action::kLeaveRendezvous:
        guard_.fence_at(std::nullopt);  // leaving on a signal: the workers get their grace
        rendezvous_->leave(shutdown_signal_);
        break;
      case Action::kExit: exit_job(); break;
    }
  }

  // --- workers ------------------------------------------------------------------------------

  void start_workers() {
    // attempt_N: this node's N-th start of its workers (rounds are numbered job-wide).
    attempt_ = node_.attempts_started++;
    events_.set_round(node_.round.group_rank, attempt_);
    if (node_.round.restart_count > 0 && announced_restarts_.insert(node_.round.restart_count).second) {
      say(restart_announcement(node_.round, config_.max_restarts));
      events_.write(records::restart(node_.round, config_.max_restarts));
    }
    further_failures_.clear();
    grace_timer_.cancel();
    if (const int importing = group_.warm_start().importing_fd(); importing >= 0) return wait_for_zygote(importing);
    workers_.start(attempt_, start_by());
  }

  // --warm_start: the warm interpreter still imports; the workers start once it is ready (or
  // gone, or kZygoteImportWait has passed), not cold beside it (warm_start.hpp says why). The
  // loop goes on meanwhile: a stop or a signal before then ends the wait (handle()).
  void wait_for_zygote(int importing) {
    waiting_for_zygote_ = true;
    zygote_socket_ = std::make_unique<asio::posix::stream_descriptor>(io_, ::dup(importing));
    const auto waited = [this, generation = ++zygote_waits_](std::error_code ec) {
      if (ec || generation != zygote_waits_ || !waiting_for_zygote_) return;
      stop_waiting_for_zygote();
      workers_.start(attempt_, start_by());
      publish_status();
    };
    zygote_socket_->async_wait(asio::posix::stream_descriptor::wait_read, waited);
    zygote_timer_.expires_after(kZygoteImportWait);
    zygote_timer_.async_wait(waited);
  }

  void stop_waiting_for_zygote() {
    waiting_for_zygote_ = false;
    ++zygote_waits_;
    zygote_timer_.cancel();
    zygote_socket_.reset();
  }

  void arm_grace_timer() {
    grace_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.shutdown_timeout)));
    grace_timer_.async_wait([this, round = node_.round.round](std::error_code ec) {
      if (!ec && round == node_.round.round) dispatch(occurred::GraceExpired{});
    });
  }

  // Once per round: the report of its end and an exit right after it both ask for it (an exit
  // also ends a round that was not reported, stopped by a signal or by the job's end).
  void end_round() {
    if (workers_.end_round()) grace_timer_.cancel();
  }

  // Nodes quarantined since the last word of the coordinator: logged once each, on every node.
  void log_quarantined(const std::vector<elastic::QuarantinedNode>& all) {
    for (const auto& q : note_quarantined(node_, all)) events_.write(records::quarantined(q));
  }

  void exit_job() {
    end_round();
    signals_.close();
    log_quarantined(outcome_.quarantined);
    const JobExit e = job_exit(outcome_, shutdown_signal_, config_.program);
    exit_code_ = e.exit_code;
    if (!e.console.empty()) say(e.console);
    if (e.root_cause) node_.last_failure = e.root_cause;
    if (!outcome_.stop_reason.empty()) events_.write(records::restart_stopped(outcome_.stop_reason, outcome_.restarts));
    events_.write(records::exit(outcome_, exit_code_, shutdown_signal_));
    if (!config_.result_file.empty()) {
      const std::string error = write_result_file(
          config_.result_file,
          job_result(outcome_, exit_code_, shutdown_signal_, std::max(attempt_, 0), config_.max_restarts));
      if (!error.empty()) say("ddprun: " + error + "\n");
    }
    status_.reset();
    io_.stop();
  }

  // --- hangs, the live view, signals --------------------------------------------------------

  HangWatch::Hooks hang_hooks() {
    HangWatch::Hooks h;
    h.response.say = [](const std::string& text) { say(text); };
    h.response.record = [this](EventRecord record) { events_.write(std::move(record)); };
    h.changed = [this] { publish_status(); };
    h.beat = [this](int local_rank, double at, std::optional<long long> step, std::optional<double> deadline,
                    double timeout) {
      if (status_) status_->update([&](JobView& view) { record_beat(view, local_rank, at, step, deadline, timeout); });
    };
    h.response.identity = [this](const WorkerProcess& w) { return workers_.identity(w); };
    h.response.running_round = [this]() -> std::optional<int> {
      if (phase_ != Phase::kRunning) return std::nullopt;
      return node_.round.round;
    };
    h.response.still_current = [this](int r) { return r == node_.round.round && phase_ != Phase::kExiting; };
    h.response.failed = [this](const elastic::WorkerFailure& f) { workers_.failed(f); };
    return h;
  }

  void publish_status() {
    if (!status_) return;
    node_.hangs_found = hangs_->hangs_found();
    std::vector<RankView> ranks;
    for (const auto& w : group_.workers()) ranks.push_back(hangs_->rank_view(*w, phase_ == Phase::kRunning));
    status_->publish(job_view(node_, phase_, settings_, hangs_->watchdog().policy().timeout(),
                              hangs_->response().reported(), std::move(ranks)));
  }

  void shut_down(int sig) {
    events_.write(records::signal_received(sig));
    dispatch(occurred::ShutdownSignal{sig});
  }

  SignalChannel::Handlers signal_handlers() {
    SignalChannel::Handlers h;
    h.child_exited = [this] { workers_.reap(); };
    h.shutdown = [this](int sig) { shut_down(sig); };
    h.forward = [this](int sig, pid_t sender) {
      // --signals_to_handle naming SIGUSR1/2: torchrun's behaviour, forwarded, then the job stops.
      if (config_.stop_signals.count(sig) > 0) return shut_down(sig);
      const bool forward = !sent_by_slurmstepd(sender);
      events_.write(records::signal_forwarded(sig, forward));
      if (forward) group_.forward(sig);  // SIGUSR1/2: e.g. checkpoint before preemption; workers go on
    };
    return h;
  }

  asio::io_context& io_;
  config::LaunchConfig config_;
  std::map<std::string, std::string> environ_;
  std::unique_ptr<elastic::Rendezvous> rendezvous_;
  RunPaths paths_;
  Containment& containment_;
  OrphanGuard& guard_;  // also the fence's backstop (orphan_guard.hpp)
  std::optional<elastic::FenceDeadlines> fence_;  // when no worker may start any more, when the guard fences
  bool fenced_ = false;  // the workers were fenced: the rendezvous's end follows
  config::PythonInterpreter python_;  // runs_python() only
  WorkerGroup group_;
  SignalChannel signals_;
  asio::steady_timer grace_timer_;
  asio::steady_timer zygote_timer_{io_};
  std::unique_ptr<asio::posix::stream_descriptor> zygote_socket_;  // a dup of the zygote's, while waiting
  bool waiting_for_zygote_ = false;
  int zygote_waits_ = 0;  // a wait's callbacks act only for the wait they belong to
  NodeSettings settings_;
  std::unique_ptr<OutputWriters> writers_;
  EventLog events_;
  std::unique_ptr<StatusServer> status_;
  Phase phase_ = Phase::kWaitingForRound;
  NodeRecord node_;  // what the live view shows
  RoundWorkers workers_{{config_, environ_, python_, paths_, settings_, phase_, node_, group_, containment_, events_,
                         [this](Occurrence o) { dispatch(std::move(o)); }}};
  std::unique_ptr<HangWatch> hangs_;

  bool shutting_down_ = false;    // a shutdown signal was received
  int shutdown_signal_ = 0;       // the first one
  bool job_finished_ = false;     // the rendezvous ended the job, with outcome_
  elastic::JobOutcome outcome_;
  std::set<int> announced_restarts_;
  int attempt_ = 0;               // this node's start of its workers now running
  std::vector<elastic::WorkerFailure> further_failures_;  // while stopping, for workers_stopped()
  std::deque<Occurrence> queue_;
  bool dispatching_ = false;
  int exit_code_ = exit_code::kInternal;
};

Agent::Agent(asio::io_context& io, config::LaunchConfig config, std::map<std::string, std::string> environ,
             std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, Containment& containment,
             RunPaths paths)
    : impl_(std::make_unique<Impl>(io, std::move(config), std::move(environ), std::move(rendezvous), guard,
                                   containment, std::move(paths))) {}

Agent::~Agent() = default;

void Agent::block_signals(bool debug) { SignalChannel::block_signals(debug); }

int Agent::run() { return impl_->run(); }

}  // namespace ddprun::launcher
