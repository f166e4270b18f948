#include "agent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <set>
#include <system_error>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <fmt/format.h>

#include "ddprun/clocks.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/failure_text.hpp"
#include "ddprun/system.hpp"
#include "ddprun/parse.hpp"
#include "ddprun/worker_env.hpp"
#include "hangs/hang_response.hpp"
#include "hangs/stack_dump.hpp"
#include "hangs/watchdog.hpp"
#include "output/event_log.hpp"
#include "output/output_stream.hpp"
#include "output/output_writer.hpp"
#include "process/signal_channel.hpp"
#include "process/spawn.hpp"
#include "process/worker_group.hpp"
#include "report/failure_classifier.hpp"
#include "report/failure_report.hpp"
#include "report/result_file.hpp"
#include "report/status_server.hpp"
#include "report/status_view.hpp"
#include "supervisor.hpp"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

// How long the stack tools may take for all workers together before they are killed.
constexpr double kStackDumpTimeout = 60;
// At exit, how long ddprun waits for its console and log files to take what is queued.
constexpr std::chrono::seconds kExitFlushLimit{10};

// Seconds of silence after progress before the quiet warning: kQuietWarning, or for tests
// DDPRUN_QUIET_WARNING_SECONDS.
double quiet_warning_seconds(const std::map<std::string, std::string>& environ) {
  const auto it = environ.find(env::kQuietWarningSeconds);
  if (it == environ.end()) return kQuietWarning;
  return config::parse_seconds(env::kQuietWarningSeconds, it->second, config::Zero::kRefused);
}

// What an event carries besides its kind.
struct Occurrence {
  explicit Occurrence(Event e) : event(e) {}
  Event event;
  elastic::WorkerFailure failure;        // kWorkerFailed
  // kWorkerFailed of a worker's exit: what its kind is found from (Agent::Impl::classify), once
  // the other workers have been told to stop; unset where the kind was found before.
  struct KindEvidence {
    const WorkerProcess* worker;
    bool stopped_by_ddprun;
    bool after_another_failure;
  };
  std::optional<KindEvidence> kind_from;
  bool classified = false;               // kWorkerFailed: kind found and counted
  elastic::RoundAssignment assignment;   // kRoundStarted
  elastic::JobOutcome outcome;           // kJobFinished
  std::string why;                       // kStopRequested
  int signal = 0;                        // kShutdownSignal
};

}  // namespace

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
        python_(config_.runs_python() ? config::python_interpreter(environ_) : config::PythonInterpreter{}),
        group_(io, config_, environ_, config_.worker_argv(python_.program), guard, containment, paths_),
        signals_(io, signal_handlers()),
        grace_timer_(io),
        host_(host_name()) {
    if (!config_.event_log.empty()) events_ = EventLog(config_.event_log, host_);
    if (config_.status_port >= 0) {
      status_ = std::make_unique<StatusServer>(config_.status_addr, config_.status_port);
      say(fmt::format("ddprun: status at http://{}:{}/status (health: /healthz)\n", config_.status_addr,
                      status_->port()));
    }
    std::string timer_file;
    if (const auto it = environ_.find(env::kEnableFileTimer); it != environ_.end() && it->second == "1") {
      const auto given = environ_.find(env::kTimerFile);
      timer_file = given != environ_.end() && !given->second.empty()
                       ? given->second
                       : (fs::path(paths_.files_root()) / "watchdog_timer").string();
    }
    try {
      const fs::path folder = fs::path(timer_file).parent_path();
      if (!folder.empty()) fs::create_directories(folder);
      watchdog_ = std::make_unique<Watchdog>(io_, config_.hang_timeout, quiet_warning_seconds(environ_), timer_file,
                                             watchdog_handlers(), status_ != nullptr, guard.take_inotify());
    } catch (const std::system_error& e) {
      throw config::UsageError(fmt::format("{}={}: {} (with {}=1)", env::kTimerFile, timer_file, e.code().message(),
                                           env::kEnableFileTimer));
    }
    timer_file_ = timer_file;
    for (FailureKind kind : all_failure_kinds()) failures_by_kind_[to_string(kind)] = 0;
    // A worker waiting on a slow console is not hung.
    group_.output_paused = [this](int local_rank, bool paused) {
      watchdog_->output_paused(local_rank, paused);
      publish_status();
    };
    group_.output_progress = [this](int local_rank, std::optional<long long> step) {
      watchdog_->progress(local_rank, step);
    };
    std::vector<std::string> environ_list;
    for (const auto& [name, value] : environ_) environ_list.push_back(name + "=" + value);
    // py-spy is looked for whatever the program: a worker runs Python when its process tree
    // does (a shell script that runs python3), which is found only when it hangs.
    const std::string python = config_.runs_python()      ? python_.program
                               : config_.python_workers() ? config_.program
                                                          : config::python_interpreter(environ_).program;
    const auto setting = environ_.find(env::kPySpy);
    const auto py_spy = py_spy_places(setting != environ_.end() ? setting->second : "", python, search_path(environ_));
    hangs_ = std::make_unique<HangResponse>(io_, group_, find_stack_tools(search_path(environ_), py_spy),
                                            std::move(environ_list), kStackDumpTimeout, paths_.logs_root,
                                            hang_handlers());
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
    handlers.start_round = [this](const elastic::RoundAssignment& a) {
      Occurrence o(Event::kRoundStarted);
      o.assignment = a;
      dispatch(std::move(o));
    };
    handlers.stop_round = [this](elastic::StopReason reason, const std::string& why) {
      Occurrence o(Event::kStopRequested);
      o.why = why.empty() ? elastic::to_string(reason) : why;
      dispatch(std::move(o));
    };
    handlers.say = [](const std::string& line) { say(line); };
    handlers.spare = [this](int place, const std::string& why) {
      // Said once, when the node becomes a spare; a new place in the queue is only logged.
      if (spare_place_ == 0) say(fmt::format("ddprun: this node is a hot spare: {}\n", why));
      spare_place_ = place;
      events_.write("spare", {{"place", place}, {"why", why}});
      publish_status();
    };
    handlers.membership = [this](const elastic::JobMembership& m) {
      job_spares_ = m.spares;
      note_quarantined(m.quarantined);
      publish_status();
    };
    handlers.finish = [this](const elastic::JobOutcome& outcome) {
      Occurrence o(Event::kJobFinished);
      o.outcome = outcome;
      dispatch(std::move(o));
    };
    events_.write("started", {{"nproc_per_node", config_.nproc_per_node},
                              {"nnodes", fmt::format("{}:{}", config_.min_nodes, config_.max_nodes)},
                              {"max_restarts", config_.max_restarts},
                              {"program", config_.program}});
    rendezvous_->join(std::move(handlers));
    io_.run();
    // A console that takes nothing (a stalled pipe) does not keep ddprun from exiting.
    writers_->finish(kExitFlushLimit);
    watchdog_.reset();  // its timer pipe lives in the private folder
    if (!paths_.private_root.empty()) {
      std::error_code ignored;
      fs::remove_all(paths_.private_root, ignored);
    }
    return exit_code_;
  }

 private:
  // --- events -------------------------------------------------------------------------------

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
    if (o.event == Event::kShutdownSignal && shutdown_signal_ == 0) shutdown_signal_ = o.signal;
    if (o.event == Event::kJobFinished) {
      job_finished_ = true;
      outcome_ = o.outcome;
    }
    if (o.event == Event::kRoundStarted) {
      if (spare_place_ > 0) say(fmt::format("ddprun: this spare joins round {}\n", o.assignment.round));
      spare_place_ = 0;
      round_ = o.assignment;
      round_assigned_ = true;
      events_.set_round(round_.group_rank, attempts_started_);
      note_quarantined(round_.quarantined);
      events_.write("round_started", {{"round", round_.round},
                                      {"restart_count", round_.restart_count},
                                      {"group_world_size", round_.group_world_size},
                                      {"world_size", round_.world_size},
                                      {"master_addr", round_.master_addr},
                                      {"master_port", round_.master_port}});
    }
    if (o.event == Event::kStopRequested) {
      events_.write("stop_requested", {{"round", round_.round}, {"why", o.why}});
      if (phase_ == Phase::kRunning) say(fmt::format("ddprun: stopping workers: {}\n", o.why));
      if (phase_ == Phase::kWaitingForRound && !group_.workers().empty()) {
        say(fmt::format("ddprun: the round ended on another node: {}\n", o.why));  // ours had succeeded
      }
    }
    const Transition t = next_transition(phase_, o.event, shutting_down_, job_finished_);
    if (o.event == Event::kShutdownSignal) shutting_down_ = true;
    phase_ = t.next;
    for (Action action : t.actions) perform(action, o);
    classify(o);  // a failure no action reported: its kind is still logged and counted
    // Not while a hang's failures wait for their stacks: they are dispatched, then this runs.
    if ((phase_ == Phase::kRunning || phase_ == Phase::kStopping) && group_.alive_count() == 0 &&
        o.event != Event::kAllEnded && !(hangs_ && hangs_->collecting())) {
      dispatch(Occurrence(Event::kAllEnded));
    }
  }

  // A failure's kind (add_kind), found once, after the other workers were told to stop: the
  // first failure's rules cost 0.5 ms of the path from a worker's exit to its restart.
  void classify(Occurrence& o) {
    if (o.event != Event::kWorkerFailed || o.classified) return;
    if (o.kind_from) {
      add_kind(o.failure, o.kind_from->worker, o.kind_from->stopped_by_ddprun, o.kind_from->after_another_failure);
    }
    o.classified = true;
    ++failures_by_kind_[o.failure.kind.name()];
  }

  void perform(Action action, Occurrence& o) {
    switch (action) {
      case Action::kStartWorkers: start_workers(); break;
      case Action::kReportFirstFailure:
        classify(o);
        say(fmt::format("ddprun: rank {} (local rank {}) {}; stopping the other workers\n", o.failure.rank,
                        o.failure.local_rank,
                        o.failure.hung ? "hung" : "failed: " + describe_end(o.failure)));
        rendezvous_->worker_failed(round_.round, o.failure);
        break;
      case Action::kRecordFailure:
        classify(o);
        further_failures_.push_back(o.failure);
        break;
      case Action::kTerminateWorkers: group_.signal(shutdown_signal_ != 0 ? shutdown_signal_ : SIGTERM); break;
      case Action::kArmGraceTimer: arm_grace_timer(); break;
      case Action::kKillWorkers: group_.signal(SIGKILL); break;
      case Action::kReportStopped: {
        end_round();
        auto failures = std::move(further_failures_);
        further_failures_.clear();
        rendezvous_->workers_stopped(round_.round, failures);
        break;
      }
      case Action::kReportSucceeded:
        end_round();
        rendezvous_->workers_succeeded(round_.round);
        break;
      case Action::kLeaveRendezvous: rendezvous_->leave(shutdown_signal_); break;
      case Action::kExit: exit_job(); break;
    }
  }

  // --- workers ------------------------------------------------------------------------------

  void start_workers() {
    // attempt_N: this node's N-th start of its workers (rounds are numbered job-wide).
    attempt_ = attempts_started_++;
    events_.set_round(round_.group_rank, attempt_);
    if (round_.restart_count > 0 && !announced_restarts_.count(round_.restart_count)) {
      // The coordinator's count, window-aware, goes in the parentheses; a restart it made for
      // nodes joining or leaving has no reason.
      const elastic::RestartReason& reason = round_.restart_reason;
      say(reason.restart == 0 ? fmt::format("ddprun: restarting workers (restart {} of {})\n", round_.restart_count,
                                            config_.max_restarts)
                              : fmt::format("ddprun: restarting workers ({}): {}\n", describe_restart_budget(reason),
                                            describe_restart_cause(reason)));
      events_.write("restart", {{"restart_count", round_.restart_count},
                                {"max_restarts", config_.max_restarts},
                                {"decision", "restart"},
                                {"reason", elastic::describe_restart(round_.restart_reason)},
                                {"backoff", round_.backoff}});
    }
    announced_restarts_.insert(round_.restart_count);
    further_failures_.clear();
    grace_timer_.cancel();
    round_open_ = true;
    hangs_->start_round(attempt_);
    // The heartbeat files are watched before any worker starts: a fast worker's first beats
    // would otherwise go unseen, and a rank that beat early and then stopped would look like
    // one still starting up (--hang_startup) while its waiting peers were judged hung.
    const auto not_started =
        group_.start(round_, attempt_, timer_file_, [this](const std::vector<std::string>& heartbeat_files) {
          if (static_cast<int>(heartbeat_files.size()) == config_.nproc_per_node) {
            watchdog_->start_round(heartbeat_files);
          }
        });
    if (const auto memory = containment_.memory_events()) oom_kills_at_start_ = memory->oom_kills;
    for (const auto& w : group_.workers()) {
      if (w->pid > 0) events_.write("worker_started", {{"rank", w->rank}, {"local_rank", w->local_rank}, {"pid", w->pid}});
    }
    if (not_started) {
      const auto [w, error] = *not_started;
      elastic::WorkerFailure f = base_failure(*w);
      f.exit_code = (error == ENOENT || error == ENOTDIR) ? exit_code::kNotFound : exit_code::kCannotExecute;
      f.message = fmt::format("could not start {}: {}", config_.worker_argv(python_.program).front(), std::strerror(error));
      add_kind(f, nullptr, false, phase_ == Phase::kStopping);
      Occurrence occurrence(Event::kWorkerFailed);
      occurrence.failure = f;
      dispatch(std::move(occurrence));  // stops the workers already started
      return;
    }
  }

  void arm_grace_timer() {
    grace_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.shutdown_timeout)));
    const int round = round_.round;
    grace_timer_.async_wait([this, round](std::error_code ec) {
      if (!ec && round == round_.round) dispatch(Occurrence(Event::kGraceExpired));
    });
  }

  // A Python worker could not import a module: most often ddprun ran another Python than the
  // one the user installed the module into (a venv, conda), so the message names the one it ran.
  std::string import_failure_message(const std::string& import_error, const std::string& message) const {
    const std::string path = find_program(python_.program, search_path(environ_)).path;
    return fmt::format("{}{}{} (ran under {}, {}; set PYTHON_EXEC to choose another)",
                       message, message.empty() ? "" : ": ", import_error,
                       path.empty() ? python_.program : path, python_.chosen_by);
  }

  elastic::WorkerFailure base_failure(const WorkerProcess& w) const {
    elastic::WorkerFailure f;
    f.rank = w.rank;
    f.local_rank = w.local_rank;
    f.group_rank = round_.group_rank;
    f.host = host_;
    f.pid = w.pid;
    f.timestamp = wall_seconds();
    return f;
  }

  // A worker that ddprun had signalled, yet whose stderr ends in an exception of its own (a
  // SyntaxError on every rank at once): it failed on its own before the stop reached it.
  static bool raised_on_its_own(const WorkerProcess& w) {
    if (!w.err) return false;
    const auto error = find_python_error({w.err->tail().begin(), w.err->tail().end()});
    if (!error) return false;
    const std::string& type = error->type;
    return type != "KeyboardInterrupt" && type != "SystemExit" &&
           type.find("SignalException") == std::string::npos;  // torchelastic's, for SIGTERM
  }

  // The failure's kind (report/failure_classifier.hpp), the step its rank reached and whether this
  // node's workers made progress in the round (the restart policy's crash-loop test); then the
  // worker_failed event.
  void add_kind(elastic::WorkerFailure& f, const WorkerProcess* w, bool stopped_by_ddprun,
                bool after_another_failure) {
    FailureEvidence e;
    e.exit_code = f.exit_code;
    e.signal = f.signal;
    e.signal_from_outside = f.signal_from_outside;
    e.hung = f.hung;
    e.stopped_by_ddprun = stopped_by_ddprun;
    e.after_another_failure = after_another_failure;
    e.error_message = f.message;
    e.traceback = f.traceback;
    if (w != nullptr && w->err) e.stderr_tail.assign(w->err->tail().begin(), w->err->tail().end());
    if (const auto memory = containment_.memory_events()) {
      e.oom_kills = memory->oom_kills - oom_kills_at_start_;
      e.memory_peak = memory->peak;
    }
    const Classification c = classify_failure(e, config_.failure_rules);
    f.kind = c.kind;
    f.retryable = c.retryable;
    f.cause = c.cause;
    f.exception = c.exception;
    f.location = c.location;
    if (const auto step = watchdog_->policy().last_step(f.local_rank)) f.step = *step;
    f.progressed = false;
    for (int r = 0; r < config_.nproc_per_node; ++r) f.progressed = f.progressed || watchdog_->policy().ever_beat(r);
    last_failure_ = FailureView{f.rank, f.host, f.exit_code, f.kind.name(), f.retryable, f.cause};
    const auto optional = [](const std::string& text) { return text.empty() ? nlohmann::json() : nlohmann::json(text); };
    events_.write("worker_failed", {{"rank", f.rank},
                                    {"local_rank", f.local_rank},
                                    {"exit_code", f.exit_code},
                                    {"kind", f.kind.name()},
                                    {"retryable", f.retryable},
                                    {"cause", f.cause},
                                    {"exception", optional(f.exception)},
                                    {"location", optional(f.location)},
                                    {"step", f.step >= 0 ? nlohmann::json(f.step) : nlohmann::json()},
                                    {"progressed", f.progressed}});
  }

  void reap() {
    // A child that is not a worker: a stack tool, an orphaned grandchild (ddprun is a
    // subreaper) or the orphan guard.
    auto ended = group_.reap([this](pid_t pid) { hangs_->child_exited(pid); });
    // What they printed last: the stderr tail tells the kind (and a traceback whether a worker
    // that ddprun had signalled failed on its own first), stdout may hold their last steps.
    for (const auto& [worker, status] : ended) {
      if (worker->out) worker->out->read_available();
      if (worker->err) worker->err->read_available();
    }
    // Ranks that ended together: one whose peer's connection closed under it goes after the
    // others, so that the rank that died first is the failure and it the consequence, in
    // whatever order they were reaped.
    std::stable_partition(ended.begin(), ended.end(), [](const auto& e) {
      const WorkerProcess& w = *e.first;
      return !w.err || !mentions_lost_peer(w.err->tail());
    });
    for (auto [worker, status] : ended) {
      worker->alive = false;
      worker_ended(*worker, status);
    }
  }

  void worker_ended(WorkerProcess& w, int status) {
    const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    const int code = sig != 0 ? exit_code::kSignalBase + sig : WEXITSTATUS(status);
    events_.write("worker_exited", {{"rank", w.rank},
                                    {"local_rank", w.local_rank},
                                    {"pid", w.pid},
                                    {"exit_code", code},
                                    {"signal", sig != 0 ? nlohmann::json(signal_name(sig)) : nlohmann::json()},
                                    {"stopped_by_ddprun", w.sent_signal != 0 || w.sent_kill}});
    if (code == 0) {
      dispatch(Occurrence(Event::kWorkerSucceeded));
      return;
    }
    elastic::WorkerFailure f = base_failure(w);
    // Error files outlive ddprun in a log folder; the private folder is deleted at exit.
    add_error_file(f, w.error_file, !paths_.logs_root.empty());
    // After ddprun's own stop signal, an exit is the stop taking effect, not a failure, unless
    // the worker left an error message of its own.
    const bool signalled_by_us = w.sent_signal != 0 || w.sent_kill;
    const bool stopped_by_us = signalled_by_us && f.message.empty() && !(sig == 0 && raised_on_its_own(w)) &&
                               (sig == 0 || sig == w.sent_signal || (sig == SIGKILL && w.sent_kill));
    if (stopped_by_us) {
      dispatch(Occurrence(Event::kWorkerSucceeded));
      return;
    }
    if (w.err && w.err->watch_imports && !w.err->import_error().empty()) {
      f.message = import_failure_message(w.err->import_error(), f.message);
    }
    f.exit_code = code;
    f.signal = sig;
    f.signal_from_outside = sig != 0 && sig != w.sent_signal && !(sig == SIGKILL && w.sent_kill);
    Occurrence o(Event::kWorkerFailed);
    o.failure = f;
    o.kind_from = Occurrence::KindEvidence{&w, signalled_by_us, phase_ == Phase::kStopping};
    dispatch(std::move(o));
  }

  // The round's workers are gone: take what is left in their pipes and clear their groups.
  // Once per round: the report of its end and an exit right after it both ask for it (an exit
  // also ends a round that was not reported, stopped by a signal or by the job's end).
  void end_round() {
    if (!round_open_) return;
    round_open_ = false;
    grace_timer_.cancel();
    watchdog_->end_round();
    group_.end_round();
    events_.write("round_ended", {{"round", round_.round}});
  }

  // Nodes quarantined since the last word of the coordinator: logged once each, on every node.
  void note_quarantined(const std::vector<elastic::QuarantinedNode>& all) {
    for (std::size_t i = quarantined_.size(); i < all.size(); ++i) {
      events_.write("quarantined", {{"node", all[i].node}, {"why", all[i].why}});
    }
    if (all.size() > quarantined_.size()) quarantined_ = all;
  }

  void exit_job() {
    end_round();
    signals_.close();
    note_quarantined(outcome_.quarantined);
    if (shutdown_signal_ != 0) {
      exit_code_ = exit_code::kSignalBase + shutdown_signal_;
      say(fmt::format("ddprun: stopped by {}; workers stopped\n", signal_name(shutdown_signal_)));
    } else if (outcome_.exit_code == exit_code::kQuarantined && !outcome_.error.empty()) {
      exit_code_ = outcome_.exit_code;
      say(fmt::format("ddprun: {}; exit {} so that the scheduler can drain this host\n", outcome_.error, exit_code_));
    } else {
      exit_code_ = outcome_.exit_code;
      if (exit_code_ != 0) say(format_failure_summary(outcome_, config_.program));
      for (const auto& q : outcome_.quarantined) say(fmt::format("ddprun: quarantined during the job: {}: {}\n", q.node, q.why));
    }
    nlohmann::json fields = {{"exit_code", exit_code_}};
    if (shutdown_signal_ != 0) fields["signal"] = signal_name(shutdown_signal_);
    if (!outcome_.failures.empty()) {
      const auto& root = outcome_.failures.front();
      fields["root_cause"] = {
          {"rank", root.rank},           {"host", root.host},
          {"exit_code", root.exit_code}, {"hung", root.hung},
          {"kind", root.kind.name()},    {"retryable", root.retryable},
          {"cause", root.cause},         {"step", root.step >= 0 ? nlohmann::json(root.step) : nlohmann::json()}};
      last_failure_ = FailureView{root.rank, root.host, root.exit_code, root.kind.name(), root.retryable, root.cause};
    }
    if (!outcome_.stop_reason.empty()) {
      events_.write("restart", {{"decision", "stop"}, {"reason", outcome_.stop_reason}, {"restart_count", outcome_.restarts}});
      fields["stop_reason"] = outcome_.stop_reason;
    }
    if (!outcome_.error.empty()) fields["error"] = outcome_.error;
    if (!outcome_.quarantined.empty()) {
      fields["quarantined"] = nlohmann::json::array();
      for (const auto& q : outcome_.quarantined) fields["quarantined"].push_back({{"node", q.node}, {"why", q.why}});
    }
    events_.write("exit", fields);
    if (!config_.result_file.empty()) {
      const std::string error = write_result_file(
          config_.result_file, job_result(outcome_, exit_code_, shutdown_signal_, std::max(attempt_, 0), config_.max_restarts));
      if (!error.empty()) say("ddprun: " + error + "\n");
    }
    status_.reset();
    io_.stop();
  }

  // --- hangs --------------------------------------------------------------------------------

  Watchdog::Handlers watchdog_handlers() {
    Watchdog::Handlers h;
    h.hung = [this](const std::vector<HungRank>& hung, const std::vector<ProgressRecord>& records) {
      count_hang([&] { hangs_->ranks_hung(hung, "", records); });
    };
    h.beat = [this](int local_rank, double at) {
      if (!status_) return;
      const auto deadline = watchdog_->deadline(local_rank);
      const double timeout = watchdog_->policy().timeout();
      const auto step = watchdog_->policy().last_step(local_rank);
      status_->update([&](JobView& view) { record_beat(view, local_rank, at, step, deadline, timeout); });
    };
    h.quiet = [this](const std::vector<QuietRank>& quiet) {
      for (const auto& q : quiet) {
        const WorkerProcess* w = group_.by_local_rank(q.local_rank);
        if (w == nullptr || !w->alive) continue;
        say(quiet_warning(w->rank, q));
        events_.write("quiet", {{"rank", w->rank}, {"local_rank", w->local_rank}, {"silent_for", q.silent_for},
                                {"last_step", q.last_step ? nlohmann::json(*q.last_step) : nlohmann::json()}});
      }
    };
    h.learned = [this](double timeout) {
      events_.write("hang_timeout_learned", {{"hang_timeout", timeout}});
      publish_status();
    };
    h.missing = [this](double after) {
      say(fmt::format("ddprun: no worker touched its DDPRUN_HEARTBEAT_FILE in {:.0f} s: --hang_timeout=auto "
                      "cannot judge this program (the worker library beats by itself; other programs "
                      "touch the file at each step)\n", after));
      events_.write("heartbeats_missing", {{"after", after}});
    };
    h.timer_expired = [this](const ExpiredTimer& expired) { count_hang([&] { hangs_->timer_expired(expired); }); };
    return h;
  }

  // Counts the hang `respond` reports, if it is the round's first (/metrics' ddprun_hangs_total).
  template <typename Respond>
  void count_hang(Respond&& respond) {
    const bool before = hangs_->reported();
    respond();
    if (before || !hangs_->reported()) return;
    ++hangs_found_;
    publish_status();
  }

  HangResponse::Handlers hang_handlers() {
    HangResponse::Handlers h;
    h.say = [](const std::string& text) { say(text); };
    h.event = [this](std::string_view event, nlohmann::json fields) { events_.write(event, std::move(fields)); };
    h.identity = [this](const WorkerProcess& w) { return base_failure(w); };
    h.running_round = [this]() -> std::optional<int> {
      if (phase_ != Phase::kRunning) return std::nullopt;
      return round_.round;
    };
    h.still_current = [this](int round) { return round == round_.round && phase_ != Phase::kExiting; };
    h.failed = [this](const elastic::WorkerFailure& failure) {
      elastic::WorkerFailure f = failure;
      add_kind(f, group_.by_local_rank(f.local_rank), false, phase_ == Phase::kStopping);
      Occurrence o(Event::kWorkerFailed);
      o.failure = f;
      dispatch(std::move(o));
    };
    // Which ranks the others wait for: from the progress records (hangs/culprit.hpp).
    h.standing = [this](int local_rank) { return watchdog_->standing(local_rank); };
    return h;
  }

  // --- status -------------------------------------------------------------------------------

  void publish_status() {
    if (!status_) return;
    JobView view;
    view.phase = spare_place_ > 0 ? "spare" : phase_name(phase_);
    view.spare = spare_place_;
    view.attempt = attempts_started_ - 1;
    view.round = round_.round;
    view.restart_count = round_.restart_count;
    view.max_restarts = config_.max_restarts;
    view.world_size = round_.world_size;
    view.hang_timeout = watchdog_->policy().timeout();
    view.hung = hung_text(phase_, hangs_->reported());
    view.host = host_;
    view.run_id = round_assigned_ ? round_.run_id : config_.rdzv_id;
    if (round_assigned_) {
      view.nodes = round_.group_world_size;
      view.node_rank = round_.group_rank;
    }
    view.rounds_started = attempts_started_;
    view.hangs_found = hangs_found_;
    view.failures = failures_by_kind_;
    view.last_failure = last_failure_;
    view.restart_reason = elastic::describe_restart(round_.restart_reason);
    view.spares = job_spares_;
    for (const auto& q : quarantined_) view.quarantined.emplace_back(q.node, q.why);
    for (const auto& w : group_.workers()) {
      RankView r;
      r.rank = w->rank;
      r.local_rank = w->local_rank;
      r.pid = w->pid;
      r.running = w->alive;
      if (phase_ == Phase::kRunning) {
        r.last_beat = watchdog_->policy().last_beat(w->local_rank);
        r.step = watchdog_->policy().last_step(w->local_rank);
      }
      r.deadline = watchdog_->deadline(w->local_rank);
      view.ranks.push_back(r);
    }
    status_->publish(std::move(view));
  }

  // --- signals ------------------------------------------------------------------------------

  void shut_down(int sig) {
    events_.write("signal_received", {{"signal", signal_name(sig)}});
    Occurrence o(Event::kShutdownSignal);
    o.signal = sig;
    dispatch(std::move(o));
  }

  SignalChannel::Handlers signal_handlers() {
    SignalChannel::Handlers h;
    h.child_exited = [this] { reap(); };
    h.shutdown = [this](int sig) { shut_down(sig); };
    h.forward = [this](int sig, pid_t sender) {
      // --signals_to_handle naming SIGUSR1/2: torchrun's behaviour, forwarded, then the job stops.
      if (config_.stop_signals.count(sig) > 0) return shut_down(sig);
      const bool forward = !sent_by_slurmstepd(sender);
      events_.write("signal_received", {{"signal", signal_name(sig)}, {"forwarded", forward}});
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
  config::PythonInterpreter python_;  // runs_python() only
  WorkerGroup group_;
  SignalChannel signals_;
  asio::steady_timer grace_timer_;
  std::string host_;
  std::unique_ptr<OutputWriters> writers_;
  EventLog events_;
  std::unique_ptr<StatusServer> status_;
  std::unique_ptr<Watchdog> watchdog_;
  std::string timer_file_;
  std::unique_ptr<HangResponse> hangs_;

  Phase phase_ = Phase::kWaitingForRound;
  bool shutting_down_ = false;
  int shutdown_signal_ = 0;
  bool job_finished_ = false;
  elastic::JobOutcome outcome_;
  elastic::RoundAssignment round_;
  std::set<int> announced_restarts_;
  int attempts_started_ = 0;
  int attempt_ = 0;
  std::vector<elastic::WorkerFailure> further_failures_;
  bool round_assigned_ = false;
  bool round_open_ = false;  // workers were started and their round has not ended yet
  std::optional<std::vector<std::string>> job_spares_;  // the job's spares, on the node that runs the coordinator
  std::vector<elastic::QuarantinedNode> quarantined_;   // the job's quarantined nodes so far
  int spare_place_ = 0;  // this node waits as hot spare number N (rendezvous' spare); 0: it does not
  int hangs_found_ = 0;
  std::map<std::string, int> failures_by_kind_;  // this node's worker failures (/metrics)
  long long oom_kills_at_start_ = 0;  // memory_events() when the round's workers started
  std::optional<FailureView> last_failure_;
  std::deque<Occurrence> queue_;
  bool dispatching_ = false;
  int exit_code_ = exit_code::kInternal;
};

Agent::Agent(asio::io_context& io, config::LaunchConfig config,
             std::map<std::string, std::string> environ,
             std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, Containment& containment,
             RunPaths paths)
    : impl_(std::make_unique<Impl>(io, std::move(config), std::move(environ), std::move(rendezvous),
                                   guard, containment, std::move(paths))) {}

Agent::~Agent() = default;

void Agent::block_signals(bool debug) { SignalChannel::block_signals(debug); }

int Agent::run() { return impl_->run(); }

}  // namespace ddprun::launcher
