#include "agent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <fmt/format.h>

#include "ddprun/exit_codes.hpp"
#include "failure_report.hpp"
#include "line_splitter.hpp"
#include "spawn.hpp"
#include "supervisor.hpp"
#include "worker_environment.hpp"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

constexpr std::array kShutdownSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr std::array kForwardedSignals = {SIGUSR1, SIGUSR2};

bool is_shutdown_signal(int sig) {
  return std::find(kShutdownSignals.begin(), kShutdownSignals.end(), sig) != kShutdownSignals.end();
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof buffer - 1);
  return buffer;
}

// Writes all of `data` to `fd`, retrying on EINTR and short writes. False once the reader is gone.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void say(std::string_view line) { write_all(STDERR_FILENO, line); }

// SLURM's step daemon signals every process of the step itself (scancel --signal, sbatch
// --signal): the workers already have the signal, and a second copy could hit them mid-handler.
bool sent_by_slurmstepd(pid_t sender) {
  if (sender <= 0) return false;
  std::ifstream comm("/proc/" + std::to_string(sender) + "/comm");
  std::string name;
  return std::getline(comm, name) && name == "slurmstepd";
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// One stream (stdout or stderr) of one worker: read from its pipe, split into lines, written
// with the rank prefix to the console and as-is to the log file.
struct OutputStream {
  OutputStream(asio::io_context& io, int read_fd) : pipe(io, read_fd) {}
  asio::posix::stream_descriptor pipe;
  LineSplitter splitter;
  std::string prefix;
  int console_fd = -1;  // -1: not shown
  UniqueFd file;        // not written when empty
  std::array<char, 16 * 1024> buffer{};
  std::string pending;  // lines of one read, written with one write()
  bool console_broken = false;
  // A Python worker's stderr: the last line that reported a failed import, if any.
  bool watch_imports = false;
  std::string import_error;

  void consume(std::string_view data) {
    splitter.feed(data, [this](std::string_view line) { add_line(line); });
    emit();
  }
  void finish() {
    splitter.flush([this](std::string_view line) { add_line(line); });
    emit();
  }
  void add_line(std::string_view line) {
    if (watch_imports && (starts_with(line, "ModuleNotFoundError: ") || starts_with(line, "ImportError: "))) {
      import_error = line;
    }
    if (console_fd >= 0 && !console_broken) {
      pending += prefix;
      pending += line;
      pending += '\n';
    }
    if (file) {
      std::string copy(line);
      copy += '\n';
      write_all(file.get(), copy);
    }
  }
  void emit() {
    if (pending.empty()) return;
    if (!write_all(console_fd, pending)) console_broken = true;
    pending.clear();
  }
  enum class ReadResult { kData, kEmpty, kClosed };
  // Reads once from the pipe; at EOF or error passes on the last partial line and closes.
  ReadResult read_once() {
    for (;;) {
      const ssize_t n = ::read(pipe.native_handle(), buffer.data(), buffer.size());
      if (n > 0) {
        consume(std::string_view(buffer.data(), static_cast<size_t>(n)));
        return ReadResult::kData;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return ReadResult::kEmpty;
      close();
      return ReadResult::kClosed;
    }
  }
  // Reads what the pipe holds right now, without waiting for more.
  void read_available() {
    while (pipe.is_open() && read_once() == ReadResult::kData) {
    }
  }
  // The same, then closes it.
  void drain() {
    read_available();
    close();
  }
  void close() {
    if (!pipe.is_open()) return;
    finish();
    std::error_code ignored;
    pipe.close(ignored);
  }
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool alive = false;    // until its end has been handled
  bool reaped = false;   // its pid is gone: never signal it again
  int sent_signal = 0;   // the stop signal ddprun sent, 0 if none
  bool sent_kill = false;
  std::string error_file;
  std::shared_ptr<OutputStream> out;
  std::shared_ptr<OutputStream> err;
};

// What an event carries besides its kind.
struct Occurrence {
  explicit Occurrence(Event e) : event(e) {}
  Event event;
  elastic::WorkerFailure failure;        // kWorkerFailed
  elastic::RoundAssignment assignment;   // kRoundStarted
  elastic::JobOutcome outcome;           // kJobFinished
  std::string why;                       // kStopRequested
  int signal = 0;                        // kShutdownSignal
};

}  // namespace

class Agent::Impl {
 public:
  Impl(asio::io_context& io, config::LaunchConfig config, std::map<std::string, std::string> environ,
       std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, RunPaths paths)
      : io_(io),
        config_(std::move(config)),
        environ_(std::move(environ)),
        rendezvous_(std::move(rendezvous)),
        guard_(guard),
        paths_(std::move(paths)),
        signals_(io),
        grace_timer_(io),
        host_(host_name()) {
    if (config_.runs_python()) python_ = config::python_interpreter(environ_);
    argv_ = config_.worker_argv(python_.program);
  }

  int run() {
    open_signalfd();
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
    handlers.finish = [this](const elastic::JobOutcome& outcome) {
      Occurrence o(Event::kJobFinished);
      o.outcome = outcome;
      dispatch(std::move(o));
    };
    rendezvous_->join(std::move(handlers));
    io_.run();
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
  }

  void handle(const Occurrence& o) {
    if (o.event == Event::kShutdownSignal && shutdown_signal_ == 0) shutdown_signal_ = o.signal;
    if (o.event == Event::kJobFinished) {
      job_finished_ = true;
      outcome_ = o.outcome;
    }
    if (o.event == Event::kRoundStarted) round_ = o.assignment;
    if (o.event == Event::kStopRequested && phase_ == Phase::kRunning) {
      say(fmt::format("ddprun: stopping workers: {}\n", o.why));
    }
    const Transition t = next_transition(phase_, o.event, shutting_down_, job_finished_);
    if (o.event == Event::kShutdownSignal) shutting_down_ = true;
    phase_ = t.next;
    for (Action action : t.actions) perform(action, o);
    if ((phase_ == Phase::kRunning || phase_ == Phase::kStopping) && alive_count() == 0 &&
        o.event != Event::kAllEnded) {
      dispatch(Occurrence(Event::kAllEnded));
    }
  }

  void perform(Action action, const Occurrence& o) {
    switch (action) {
      case Action::kStartWorkers: start_workers(); break;
      case Action::kReportFirstFailure:
        say(fmt::format("ddprun: rank {} (local rank {}) failed: {}; stopping the other workers\n",
                        o.failure.rank, o.failure.local_rank, describe_end(o.failure)));
        rendezvous_->worker_failed(round_.round, o.failure);
        break;
      case Action::kRecordFailure: further_failures_.push_back(o.failure); break;
      case Action::kTerminateWorkers:
        signal_workers(shutdown_signal_ != 0 ? shutdown_signal_ : SIGTERM);
        break;
      case Action::kArmGraceTimer: arm_grace_timer(); break;
      case Action::kKillWorkers: signal_workers(SIGKILL); break;
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
    const std::string attempt = fmt::format("attempt_{}", attempts_started_++);
    if (round_.restart_count > 0 && !announced_restarts_.count(round_.restart_count)) {
      say(fmt::format("ddprun: restarting workers (restart {} of {})\n", round_.restart_count,
                      config_.max_restarts));
    }
    announced_restarts_.insert(round_.restart_count);
    workers_.clear();
    further_failures_.clear();
    grace_timer_.cancel();
    for (int local_rank = 0; local_rank < config_.nproc_per_node; ++local_rank) {
      auto w = std::make_unique<Worker>();
      w->local_rank = local_rank;
      w->rank = round_.base_rank + local_rank;
      const std::string rank_dir = fmt::format("{}/rank_{}", attempt, w->rank);
      const std::string error_root = paths_.logs_root.empty() ? paths_.private_root : paths_.logs_root;
      if (!error_root.empty()) {
        const fs::path dir = fs::path(error_root) / rank_dir;
        std::error_code ec;
        fs::remove_all(dir, ec);  // a re-used log dir must not show an older attempt's files
        fs::create_directories(dir, ec);
        if (ec) throw std::system_error(ec, "cannot create " + dir.string());
        w->error_file = (dir / "error.json").string();
      }
      SpawnRequest request;
      request.argv = argv_;
      request.environ = worker_environment(environ_, config_, round_, local_rank, w->error_file);
      request.own_process_group = !config_.debug;
      Pipe out_pipe, err_pipe;
      if (!config_.debug) {
        out_pipe = Pipe::create();
        err_pipe = Pipe::create();
        request.stdout_fd = out_pipe.write_end.get();
        request.stderr_fd = err_pipe.write_end.get();
      }
      const SpawnResult spawned = spawn_process(request);
      if (spawned.pid < 0) {
        elastic::WorkerFailure f = base_failure(*w);
        f.exit_code = (spawned.error == ENOENT || spawned.error == ENOTDIR) ? exit_code::kNotFound
                                                                              : exit_code::kCannotExecute;
        f.message = fmt::format("could not start {}: {}", argv_.front(), std::strerror(spawned.error));
        workers_.push_back(std::move(w));
        Occurrence occurrence(Event::kWorkerFailed);
        occurrence.failure = f;
        dispatch(std::move(occurrence));
        return;  // the failure stops the workers already started
      }
      w->pid = spawned.pid;
      w->alive = true;
      if (!config_.debug) {
        guard_.watch(w->pid);
        w->out = open_stream(out_pipe, *w, 1, rank_dir + "/stdout.log");
        w->err = open_stream(err_pipe, *w, 2, rank_dir + "/stderr.log");
      }
      workers_.push_back(std::move(w));
    }
  }

  std::shared_ptr<OutputStream> open_stream(Pipe& pipe, const Worker& w, int stream_bit,
                                            const std::string& log_name) {
    pipe.write_end.reset();
    const int fd = pipe.read_end.release();
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto s = std::make_shared<OutputStream>(io_, fd);
    s->prefix = fmt::format("[rank{}]: ", w.rank);
    s->watch_imports = stream_bit == 2 && config_.runs_python();
    const bool redirected = config_.redirects.mask_for(w.local_rank) & stream_bit;
    const bool teed = config_.tee.mask_for(w.local_rank) & stream_bit;
    const bool shown = !config_.local_ranks_filter || config_.local_ranks_filter->count(w.local_rank);
    if (!redirected && shown) s->console_fd = stream_bit == 1 ? STDOUT_FILENO : STDERR_FILENO;
    if (!paths_.logs_root.empty() && (paths_.log_everything || redirected || teed)) {
      const std::string path = (fs::path(paths_.logs_root) / log_name).string();
      s->file.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!s->file) say(fmt::format("ddprun: cannot write {}: {}\n", path, std::strerror(errno)));
    }
    read_stream(s);
    return s;
  }

  // Waits for readability and reads in the handler: data never sits inside asio, so drain()
  // at the end of a round sees everything in order.
  void read_stream(const std::shared_ptr<OutputStream>& s) {
    s->pipe.async_wait(asio::posix::stream_descriptor::wait_read, [this, s](std::error_code ec) {
      if (!ec && s->pipe.is_open() && s->read_once() != OutputStream::ReadResult::kClosed) {
        read_stream(s);
      }
    });
  }

  int alive_count() const {
    int n = 0;
    for (const auto& w : workers_) n += w->alive;
    return n;
  }

  void signal_workers(int sig) {
    for (auto& w : workers_) {
      if (!w->alive || w->reaped) continue;
      if (sig == SIGKILL) w->sent_kill = true;
      else w->sent_signal = sig;
      // The whole process group, so the worker's own children get it too.
      ::kill(config_.debug ? w->pid : -w->pid, sig);
    }
  }

  // To each worker's own process only: its children (data loaders, tools it runs) keep the
  // default action of SIGUSR1/2, which is to die.
  void forward_signal(int sig) {
    for (auto& w : workers_) {
      if (w->alive && !w->reaped) ::kill(w->pid, sig);
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

  elastic::WorkerFailure base_failure(const Worker& w) const {
    elastic::WorkerFailure f;
    f.rank = w.rank;
    f.local_rank = w.local_rank;
    f.group_rank = round_.group_rank;
    f.host = host_;
    f.pid = w.pid;
    f.timestamp = now_seconds();
    return f;
  }

  void reap() {
    // Collect every exit first: workers that died together are all failures, not "stopped
    // by ddprun" because the first one's stop signal went out before the others were seen.
    std::vector<std::pair<Worker*, int>> ended;
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) {
        if (pid < 0 && errno == EINTR) continue;
        break;
      }
      // Not a worker: an orphaned grandchild (ddprun is a subreaper) or the orphan guard.
      auto it = std::find_if(workers_.begin(), workers_.end(),
                             [pid](const auto& w) { return !w->reaped && w->pid == pid; });
      if (it == workers_.end()) continue;
      (*it)->reaped = true;
      ended.emplace_back(it->get(), status);
    }
    for (auto [worker, status] : ended) {
      worker->alive = false;
      worker_ended(*worker, status);
    }
  }

  void worker_ended(Worker& w, int status) {
    const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    const int code = sig != 0 ? exit_code::kSignalBase + sig : WEXITSTATUS(status);
    if (code == 0) {
      dispatch(Occurrence(Event::kWorkerSucceeded));
      return;
    }
    elastic::WorkerFailure f = base_failure(w);
    // Error files outlive ddprun in a log folder; the private folder is deleted at exit.
    add_error_file(f, w.error_file, !paths_.logs_root.empty());
    // After ddprun's own stop signal, an exit is the stop taking effect, not a failure, unless
    // the worker left an error message of its own.
    const bool stopped_by_us = (w.sent_signal != 0 || w.sent_kill) && f.message.empty() &&
                               (sig == 0 || sig == w.sent_signal || (sig == SIGKILL && w.sent_kill));
    if (stopped_by_us) {
      dispatch(Occurrence(Event::kWorkerSucceeded));
      return;
    }
    if (w.err && w.err->watch_imports) {
      w.err->read_available();  // the traceback a worker printed before it exited
      if (!w.err->import_error.empty()) f.message = import_failure_message(w.err->import_error, f.message);
    }
    f.exit_code = code;
    f.signal = sig;
    f.signal_from_outside = sig != 0 && sig != w.sent_signal && !(sig == SIGKILL && w.sent_kill);
    Occurrence o(Event::kWorkerFailed);
    o.failure = f;
    dispatch(std::move(o));
  }

  // The round's workers are gone: take what is left in their pipes and clear their groups.
  void end_round() {
    grace_timer_.cancel();
    for (auto& w : workers_) {
      if (w->out) w->out->drain();
      if (w->err) w->err->drain();
      if (!config_.debug && w->pid > 0) {
        ::kill(-w->pid, SIGKILL);  // children the worker left behind in its group
        guard_.forget(w->pid);
      }
    }
  }

  void exit_job() {
    end_round();
    if (shutdown_signal_ != 0) {
      exit_code_ = exit_code::kSignalBase + shutdown_signal_;
      say(fmt::format("ddprun: stopped by {}; workers stopped\n", signal_name(shutdown_signal_)));
    } else {
      exit_code_ = outcome_.exit_code;
      if (exit_code_ != 0) say(format_failure_summary(outcome_, config_.program));
    }
    io_.stop();
  }

  // --- signals ------------------------------------------------------------------------------

  void open_signalfd() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (int sig : kShutdownSignals) sigaddset(&set, sig);
    for (int sig : kForwardedSignals) sigaddset(&set, sig);
    const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
    signals_.assign(fd);
    read_signals();
  }

  void read_signals() {
    signals_.async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
      if (ec) return;
      signalfd_siginfo info;
      while (::read(signals_.native_handle(), &info, sizeof info) == sizeof info) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) {
          reap();
        } else if (is_shutdown_signal(sig)) {
          Occurrence o(Event::kShutdownSignal);
          o.signal = sig;
          dispatch(std::move(o));
        } else if (!sent_by_slurmstepd(static_cast<pid_t>(info.ssi_pid))) {
          forward_signal(sig);  // SIGUSR1/2: e.g. checkpoint before preemption; workers go on
        }
      }
      if (phase_ != Phase::kExiting) read_signals();
    });
  }

  asio::io_context& io_;
  config::LaunchConfig config_;
  std::map<std::string, std::string> environ_;
  std::unique_ptr<elastic::Rendezvous> rendezvous_;
  OrphanGuard& guard_;
  RunPaths paths_;
  asio::posix::stream_descriptor signals_;
  asio::steady_timer grace_timer_;
  std::string host_;
  config::PythonInterpreter python_;  // runs_python() only
  std::vector<std::string> argv_;

  Phase phase_ = Phase::kWaitingForRound;
  bool shutting_down_ = false;
  int shutdown_signal_ = 0;
  bool job_finished_ = false;
  elastic::JobOutcome outcome_;
  elastic::RoundAssignment round_;
  std::set<int> announced_restarts_;
  int attempts_started_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<elastic::WorkerFailure> further_failures_;
  std::deque<Occurrence> queue_;
  bool dispatching_ = false;
  int exit_code_ = exit_code::kInternal;
};

Agent::Agent(asio::io_context& io, config::LaunchConfig config,
             std::map<std::string, std::string> environ,
             std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, RunPaths paths)
    : impl_(std::make_unique<Impl>(io, std::move(config), std::move(environ), std::move(rendezvous),
                                   guard, std::move(paths))) {}

Agent::~Agent() = default;

void Agent::block_signals(bool debug) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : kShutdownSignals) sigaddset(&set, sig);
  for (int sig : kForwardedSignals) sigaddset(&set, sig);
  if (debug) {
    // The worker owns the terminal: Ctrl-C and Ctrl-\ are for it (and its debugger), not ddprun.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGQUIT, SIG_IGN);
    sigdelset(&set, SIGINT);
    sigdelset(&set, SIGQUIT);
  }
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  // ddprun writes to pipes that may close (ddprun ... | head): see EPIPE, not die of SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
}

int Agent::run() { return impl_->run(); }

}  // namespace ddprun::launcher
