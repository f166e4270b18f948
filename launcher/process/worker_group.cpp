#include "process/worker_group.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "ddprun/clocks.hpp"
#include "ddprun/line_prefix.hpp"
#include "ddprun/worker_env.hpp"
#include "output/output_writer.hpp"
#include "process/numa_binding.hpp"
#include "process/worker_environment.hpp"

namespace ddprun::launcher {

namespace fs = std::filesystem;

WorkerGroup::WorkerGroup(asio::io_context& io, const config::LaunchConfig& config,
                         std::map<std::string, std::string> environ, std::vector<std::string> argv,
                         OrphanGuard& guard, Containment& containment, const RunPaths& paths)
    : io_(io),
      config_(config),
      progress_patterns_(std::make_shared<const std::vector<config::ProgressPattern>>(
          config.progress_patterns.begin(), config.progress_patterns.end())),
      environ_(std::move(environ)),
      argv_(std::move(argv)),
      stdout_filters_(std::make_shared<const std::vector<std::string>>(config.duplicate_stdout_filters)),
      stderr_filters_(std::make_shared<const std::vector<std::string>>(config.duplicate_stderr_filters)),
      guard_(guard),
      containment_(containment),
      paths_(paths) {
  if (config_.progress && config_.python_workers()) {
    python_bootstrap_ = python_bootstrap_folder();
    if (python_bootstrap_.empty()) {
      say("ddprun: share/ddprun/python/sitecustomize.py is not installed beside ddprun: the progress of Python "
          "workers is not counted (--progress); reinstall ddprun\n");
    } else if (!config_.runs_python()) {  // the interpreter is the program: its options are the user's
      // Not even on PYTHONPATH, where the program would see it: -S honours PYTHONPATH.
      if (const char option = python_option_without_bootstrap(config_.program_args)) {
        say(without_bootstrap_line(option));
        python_bootstrap_.clear();
      }
    }
  }
  if (!config_.numa_binding.empty()) plan_numa_binding();
  std::error_code ec;
  std::string zygote_script;
  if (const std::string folder = python_bootstrap_folder(); !folder.empty() && fs::exists(folder + "/_ddprun_zygote.py", ec)) {
    zygote_script = folder + "/_ddprun_zygote.py";
  }
  warm_ = std::make_unique<WarmStart>(config_, argv_.front(),
                                      zygote_environment(environ_, config_, python_bootstrap_, paths_.snapshot_dir),
                                      zygote_script);
  warm_->begin();
}

void WorkerGroup::plan_numa_binding() {
  const auto skipped = [&](const std::string& why) {
    say(fmt::format("ddprun: --numa_binding={} skipped: {}; the workers run on every CPU\n", config_.numa_binding, why));
  };
  NumaTopology topology;
  const auto visible = environ_.find(env::kCudaVisibleDevices);
  topology.gpus = gpu_pci_addresses(visible == environ_.end() ? nullptr : visible->second.c_str());
  if (topology.gpus.empty()) return skipped("no GPU visible (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them)");
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return skipped(std::strerror(errno));
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) topology.allowed.insert(cpu);
  }
  // As torchrun: local rank N uses GPU N.
  std::vector<cpu_set_t> plan(config_.nproc_per_node);
  try {
    for (int local_rank = 0; local_rank < config_.nproc_per_node; ++local_rank) {
      CPU_ZERO(&plan[local_rank]);
      for (int cpu : numa_cpus(config_.numa_binding, topology, local_rank)) CPU_SET(cpu, &plan[local_rank]);
    }
  } catch (const std::runtime_error& e) {
    return skipped(e.what());
  }
  numa_cpus_ = std::move(plan);
}

namespace {

// A worker's own files, each named once.
constexpr const char* kErrorFileName = "error.json";
constexpr const char* kHeartbeatFileName = "heartbeat";
constexpr const char* kStacksFileName = "stacks.txt";
constexpr const char* kWorkerFileNames[] = {kErrorFileName, kHeartbeatFileName, kStacksFileName};

// A worker's folder in the log folder: attempt_N/rank_R, torchrun's layout.
std::string rank_folder(int attempt, int rank) { return fmt::format("attempt_{}/rank_{}", attempt, rank); }

// Where the worker of `rank` keeps its own files (error file, heartbeat, stacks) in this
// attempt: a path to which "error.json" and the others are appended. In a log folder, the
// attempt_N/rank_R/ folder, emptied of an earlier run's files. In the private folder, which no
// one reads after ddprun, flat names (rank_R.error.json): a folder per worker costs a block on
// the disk, and on ext4 mounted with `discard` (this project's VM) every rmdir at exit waits
// for the device to discard that block: 22 ms to make and remove 8 rank folders and their
// heartbeat files, against 3 ms flat (scripts/bench/phases.py, docs/performance.md). A restarted worker
// must not find the files of the attempt before, so they are removed.
std::string worker_files_prefix(const RunPaths& paths, int attempt, int rank) {
  std::error_code ec;
  if (!paths.logs_root.empty()) {
    const fs::path dir = fs::path(paths.logs_root) / rank_folder(attempt, rank);
    fs::remove_all(dir, ec);  // a re-used log dir must not show an older attempt's files
    fs::create_directories(dir, ec);
    if (ec) throw std::system_error(ec, "cannot create " + dir.string());
    return dir.string() + "/";
  }
  const std::string prefix = fmt::format("{}/rank_{}.", paths.private_root, rank);
  for (const char* name : kWorkerFileNames) ::unlink((prefix + name).c_str());
  return prefix;
}

}  // namespace

std::vector<WorkerGroup::Planned> WorkerGroup::plan(const elastic::RoundAssignment& round, int attempt,
                                                    const std::string& timer_file) const {
  std::vector<Planned> planned;
  for (int local_rank = 0; local_rank < config_.nproc_per_node; ++local_rank) {
    auto w = std::make_unique<WorkerProcess>();
    w->local_rank = local_rank;
    w->rank = round.base_rank + local_rank;
    if (!paths_.files_root().empty()) {
      const std::string prefix = worker_files_prefix(paths_, attempt, w->rank);
      w->error_file = prefix + kErrorFileName;
      w->heartbeat_file = prefix + kHeartbeatFileName;
      w->stacks_file = prefix + kStacksFileName;
    }
    if (!python_bootstrap_.empty() && !paths_.private_root.empty()) {
      // Opened by the worker for appending: the answers of an earlier attempt's worker go.
      w->python_stacks_file = fmt::format("{}/rank_{}.python_stacks", paths_.private_root, w->rank);
      ::unlink(w->python_stacks_file.c_str());
    }
    WorkerFiles files;
    files.error_file = w->error_file;
    files.heartbeat_file = w->heartbeat_file;
    files.timer_file = timer_file;
    files.python_bootstrap = python_bootstrap_;
    files.python_stacks = w->python_stacks_file;
    files.snapshot_dir = paths_.snapshot_dir;
    std::vector<std::string> environ = worker_environment(environ_, config_, round, local_rank, files);
    planned.push_back(Planned{std::move(w), std::move(environ)});
  }
  return planned;
}

WorkerGroup::Started WorkerGroup::start(
    const elastic::RoundAssignment& round, int attempt, const std::string& timer_file,
    const std::function<void(const std::vector<std::string>& heartbeat_files)>& files_ready,
    std::optional<std::chrono::steady_clock::time_point> start_by) {
  workers_.clear();
  std::vector<Planned> planned = plan(round, attempt, timer_file);
  std::vector<std::string> heartbeat_files;
  for (const Planned& p : planned) {
    if (!p.worker->heartbeat_file.empty()) heartbeat_files.push_back(p.worker->heartbeat_file);
  }
  files_ready(heartbeat_files);
  const Filtered filtered_out = open_filtered(attempt, 1);
  const Filtered filtered_err = open_filtered(attempt, 2);
  containment_.prepare_round();
  warm_->start_round();
  Started started;
  for (Planned& p : planned) {
    started = start_worker(p, attempt, filtered_out, filtered_err, start_by);
    if (started.failed != nullptr || started.past_deadline) break;
  }
  containment_.remove_retired();  // the last round's cgroup, off the restart's path
  return started;
}

WorkerGroup::Started WorkerGroup::start_worker(Planned& planned, int attempt, const Filtered& filtered_out,
                                               const Filtered& filtered_err,
                                               std::optional<std::chrono::steady_clock::time_point> start_by) {
  const auto past_deadline = [&] { return start_by && std::chrono::steady_clock::now() >= *start_by; };
  std::unique_ptr<WorkerProcess>& w = planned.worker;
  StartRequest request;
  request.argv = argv_;
  request.environ = std::move(planned.environ);
  request.own_process_group = !config_.debug;
  request.cgroup_dir_fd = containment_.dir_fd();
  request.cgroup_procs_fd = containment_.procs_fd();
  if (!numa_cpus_.empty()) request.cpus = &numa_cpus_[w->local_rank];
  // Told by the child itself before its exec, so that ddprun's death right after the fork
  // leaves no worker the guard does not wait for (see below for the cgroup).
  if (!config_.debug && !containment_.has_cgroup()) request.guard_fd = guard_.socket();
  Pipe out_pipe, err_pipe;
  if (!config_.debug) {
    out_pipe = Pipe::create();
    err_pipe = Pipe::create();
    request.stdout_fd = out_pipe.write_end.get();
    request.stderr_fd = err_pipe.write_end.get();
  }
  // Checked here and again by the worker itself just before it starts: ddprun may be stopped
  // between the two (StartRequest::start_by).
  if (past_deadline()) return Started{nullptr, 0, true};
  request.start_by = start_by;
  const StartedProcess process = start_process(request);
  if (process.spawned.error == SpawnResult::kPastDeadline) return Started{nullptr, 0, true};
  w->forked = wall_seconds();
  w->warm = process.forked;
  workers_.push_back(std::move(w));
  WorkerProcess& started = *workers_.back();
  if (process.spawned.pid < 0) return Started{&started, process.spawned.error, false};
  started.pid = process.spawned.pid;
  started.alive = true;
  if (!config_.debug) {
    // With a cgroup the guard kills the whole cgroup if ddprun dies: telling it each group
    // too would wake it twice a worker for nothing. A spawned worker told it itself
    // (request.guard_fd); a worker forked by the warm interpreter is told of here.
    const bool told_by_itself = !process.forked && request.guard_fd >= 0;
    if (!containment_.has_cgroup() && !told_by_itself) guard_.watch(started.pid);
    out_pipe.write_end.reset();
    err_pipe.write_end.reset();
    const std::string rank_dir = rank_folder(attempt, started.rank);
    started.out = open_stream(out_pipe.read_end.release(), started, 1, rank_dir + "/stdout.log", filtered_out);
    started.err = open_stream(err_pipe.read_end.release(), started, 2, rank_dir + "/stderr.log", filtered_err);
  }
  // A forked worker looks at the deadline only after ddprun has its pid, and kills itself if it
  // passed: ddprun, late too, tells the fence first, so that the worker's end is no failure.
  // (Should the deadline pass between ddprun's look and the worker's, the last worker's end may
  // be reported as a failure before the fence's timer runs; the node is fenced all the same.)
  if (process.forked && past_deadline()) return Started{nullptr, 0, true};
  return {};
}

WorkerGroup::StartedProcess WorkerGroup::start_process(const StartRequest& request) {
  // Forked from the warm interpreter where warm start applies to this worker and the
  // interpreter can fork it (WarmStart::fork says why not, once a start), else cold.
  if (const pid_t pid = warm_->fork(request); pid > 0) {
    // It is ddprun's child already (zygote.hpp) and may not have run yet: its group is made
    // here too, so that killpg reaches it at once, as spawn_process() does for a fork.
    if (request.own_process_group) ::setpgid(pid, pid);
    return StartedProcess{SpawnResult{pid, 0}, true};
  }
  return StartedProcess{spawn_process(request), false};
}

WorkerGroup::Filtered WorkerGroup::open_filtered(int attempt, int stream_bit) const {
  Filtered filtered;
  filtered.filters = stream_bit == 1 ? stdout_filters_ : stderr_filters_;
  if (filtered.filters->empty() || paths_.logs_root.empty()) return filtered;
  const std::string path = (fs::path(paths_.logs_root) / fmt::format("attempt_{}", attempt) /
                            (stream_bit == 1 ? "filtered_stdout.log" : "filtered_stderr.log"))
                               .string();
  auto file = std::make_shared<UniqueFd>(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (*file) {
    filtered.file = std::move(file);
  } else {
    say(fmt::format("ddprun: cannot write {}: {}\n", path, std::strerror(errno)));
  }
  return filtered;
}

std::shared_ptr<OutputStream> WorkerGroup::open_stream(int fd, const WorkerProcess& w, int stream_bit,
                                                       const std::string& log_name, Filtered filtered) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  auto s = std::make_shared<OutputStream>(io_, fd);
  s->set_prefix(config::line_prefix(config_.log_line_prefix, config_.role, w.rank, w.local_rank));
  s->filters = std::move(filtered.filters);
  s->filtered_file = std::move(filtered.file);
  s->watch_imports = stream_bit == 2 && config_.runs_python();
  if (stream_bit == 2) s->tail_lines = kFailureTailLines;
  s->on_pause = [this, local_rank = w.local_rank](bool paused) {
    if (output_paused) output_paused(local_rank, paused);
  };
  if (!progress_patterns_->empty()) {
    s->progress = progress_patterns_;
    s->on_progress = [this, local_rank = w.local_rank](std::optional<long long> step) {
      if (output_progress) output_progress(local_rank, step);
    };
  }
  const bool redirected = config_.redirects.mask_for(w.local_rank) & stream_bit;
  const bool teed = config_.tee.mask_for(w.local_rank) & stream_bit;
  const bool shown = !config_.local_ranks_filter || config_.local_ranks_filter->count(w.local_rank);
  // As torchrun: --tee wins over --redirects for the streams it names (files and console).
  if ((!redirected || teed) && shown) s->console_fd = stream_bit == 1 ? STDOUT_FILENO : STDERR_FILENO;
  if (!paths_.logs_root.empty() && (paths_.log_everything || redirected || teed)) {
    const std::string path = (fs::path(paths_.logs_root) / log_name).string();
    auto file = std::make_shared<UniqueFd>(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (*file) {
      s->file = std::move(file);
    } else {
      say(fmt::format("ddprun: cannot write {}: {}\n", path, std::strerror(errno)));
    }
  }
  s->start();
  return s;
}

void WorkerGroup::signal(int sig) {
  for (auto& w : workers_) {
    if (!w->alive || w->reaped) continue;
    if (sig == SIGKILL) w->sent_kill = true;
    else w->sent_signal = sig;
    ::kill(config_.debug ? w->pid : -w->pid, sig);
  }
}

void WorkerGroup::forward(int sig) {
  for (auto& w : workers_) {
    if (w->alive && !w->reaped) ::kill(w->pid, sig);
  }
}

std::vector<int> WorkerGroup::gasp(int sig) {
  std::vector<int> ranks;
  for (auto& w : workers_) {
    if (!w->alive || w->reaped) continue;
    w->sent_gasp = sig;
    ::kill(w->pid, sig);
    ranks.push_back(w->rank);
  }
  return ranks;
}

std::vector<std::pair<WorkerProcess*, int>> WorkerGroup::reap(const std::function<void(pid_t, int)>& other) {
  // Every exit first: workers that died together are all failures, not "stopped by ddprun"
  // because the first one's stop signal went out before the others were seen.
  std::vector<std::pair<WorkerProcess*, int>> ended;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (pid < 0 && errno == EINTR) continue;
      break;
    }
    WorkerProcess* worker = nullptr;
    for (auto& w : workers_) {
      if (!w->reaped && w->pid == pid) worker = w.get();
    }
    if (worker == nullptr) {
      if (!warm_->reaped(pid, status)) other(pid, status);
      continue;
    }
    worker->reaped = true;
    ended.emplace_back(worker, status);
  }
  return ended;
}

void WorkerGroup::end_round() {
  for (auto& w : workers_) {
    if (w->out) w->out->drain();
    if (w->err) w->err->drain();
    if (!config_.debug && w->pid > 0) ::kill(-w->pid, SIGKILL);  // children left in its group
  }
  containment_.kill_all({guard_.pid(), warm_->zygote_pid()});
  for (auto& w : workers_) {
    if (!config_.debug && !containment_.has_cgroup() && w->pid > 0) guard_.forget(w->pid);
  }
}

int WorkerGroup::alive_count() const {
  int n = 0;
  for (const auto& w : workers_) n += w->alive;
  return n;
}

WorkerProcess* WorkerGroup::by_local_rank(int local_rank) const {
  for (const auto& w : workers_) {
    if (w->local_rank == local_rank) return w.get();
  }
  return nullptr;
}

}  // namespace ddprun::launcher
