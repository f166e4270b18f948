// ddprun: command line -> launch configuration -> rendezvous -> agent -> exit code.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent.hpp"
#include "cli.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/file_system.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "ddprun/rendezvous_config.hpp"
#include "ddprun/slurm_env.hpp"
#include "ddprun/snapshot_replication.hpp"
#include "ddprun/slurm_options.hpp"
#include "ddprun/user_error.hpp"
#include "ddprun/worker_env.hpp"
#include "output/output_writer.hpp"
#include "process/containment.hpp"
#include "process/process_tree.hpp"
#include "process/spawn.hpp"
#include "process/worker_environment.hpp"
#include "rendezvous_setup.hpp"
#include "report/report_command.hpp"
#include "report/status_command.hpp"
#include "snapshots/snapshot_dir.hpp"
#include "snapshots/snapshot_place.hpp"

extern char** environ;

namespace {

using namespace ddprun;

// The program cannot be started (exit 127 or 126). Told without "error:": it is what a shell
// says, and distinct from a program that started and failed.
class CannotStart : public UserError {
 public:
  using UserError::UserError;
};

std::map<std::string, std::string> read_environment() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) vars.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return vars;
}

#ifdef DDPRUN_BESIDE_A_PYTHON
// The wheel's ddprun is the program pip put in a Python environment's scripts folder (bin/): its
// Python workers run under that environment's Python, the python3 (else python) beside it, as
// torchrun's run under the interpreter torchrun was installed with. Unless PYTHON_EXEC, or
// `python -m ddprun` (DDPRUN_DEFAULT_PYTHON), said which; and not where none is beside it (pip
// install --user or --prefix: then python3 from PATH). Only in the wheel: beside a CMake-installed
// /usr/local/bin/ddprun, python3 need not be the one the user runs.
void default_python_beside(std::map<std::string, std::string>& vars) {
  if (vars.count(env::kDefaultPython) != 0) return;
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) return;
  for (const char* name : {"python3", "python"}) {
    const std::filesystem::path python = folder / name;
    if (::access(python.c_str(), X_OK) == 0) {
      vars[env::kDefaultPython] = python.string();
      return;
    }
  }
}
#endif

std::string get(const std::map<std::string, std::string>& vars, const char* name, const char* fallback) {
  auto it = vars.find(name);
  return it != vars.end() ? it->second : fallback;
}

// Where ddprun makes its temporary folder, and the setting that named it (for errors): log
// files the user reads go to TMPDIR (else /tmp), as Python's tempfile would put them. The
// private folder, which only ddprun and its workers use (heartbeat and error files, stacks),
// goes to TMPDIR when the user set it, else to /dev/shm when that is a tmpfs ddprun may write
// in: creating and removing a worker's heartbeat file on this VM's ext4 /tmp cost ddprun
// 0.17 ms of CPU a worker, most of its CPU between two rounds (perf stat, 8 workers: 4.2 ms
// against 2.8 ms on tmpfs).
struct TempParent {
  std::string path;
  std::string setting;  // "TMPDIR=/scratch"
};
TempParent temp_parent(const config::LaunchConfig& cfg, const std::map<std::string, std::string>& vars) {
  const auto tmpdir = vars.find("TMPDIR");
  const bool logs = cfg.redirects.any() || cfg.tee.any() || cfg.duplicates_lines();
  if (tmpdir == vars.end() && !logs && writable_tmpfs("/dev/shm")) return {"/dev/shm", "/dev/shm"};
  const std::string path = tmpdir != vars.end() ? tmpdir->second : "/tmp";
  return {path, fmt::format("TMPDIR={}", shown(path))};
}

// Fails before anything starts when the program cannot run: "could not start" (127 or 126)
// is then distinct from a program that started and failed.
void check_program(const config::LaunchConfig& cfg, const std::map<std::string, std::string>& vars) {
  const std::string path = launcher::search_path(vars);
  const auto fail = [](const std::string& what, int error, const std::string& hint) {
    throw CannotStart(fmt::format("could not start {}: {}{}", what, std::strerror(error), hint),
                      error == ENOENT || error == ENOTDIR ? exit_code::kNotFound : exit_code::kCannotExecute);
  };
  if (cfg.runs_python()) {
    const std::string python = config::python_interpreter(vars).program;
    const auto found = launcher::find_program(python, path);
    if (found.error != 0) fail(python, found.error, " (set PYTHON_EXEC to the interpreter to use)");
    if (!cfg.module && ::access(cfg.program.c_str(), R_OK) != 0) fail(cfg.program, errno, "");
    return;
  }
  const auto found = launcher::find_program(cfg.program, path);
  if (found.error != 0) {
    fail(cfg.program, found.error,
         cfg.program.find('/') == std::string::npos ? " (not found in PATH; give a path like ./" + cfg.program + ")" : "");
  }
}

// The user's paths, checked before anything starts: a --log_dir that cannot be made or written,
// an --event_log that cannot be appended to, or a TMPDIR without room for ddprun's folder, is the
// user's mistake (exit 64), not ddprun's.
void check_user_paths(const config::LaunchConfig& cfg, const std::map<std::string, std::string>& vars) {
  namespace fs = std::filesystem;
  if (cfg.log_dir.empty()) {  // make_run_paths() makes a folder in temp_parent()
    const TempParent tmp = temp_parent(cfg, vars);
    if (::access(tmp.path.c_str(), W_OK | X_OK) != 0) {
      throw config::UsageError(
          fmt::format("{}: cannot create a folder there ({})", tmp.setting, std::strerror(errno)));
    }
  }
  if (!cfg.log_dir.empty()) {
    const auto fail = [&](const std::string& problem) {
      return config::UsageError(fmt::format("--log_dir={}: {}", shown(cfg.log_dir), problem));
    };
    std::error_code ec;
    if (fs::exists(cfg.log_dir, ec) && !fs::is_directory(cfg.log_dir, ec)) throw fail("is not a folder");
    fs::create_directories(cfg.log_dir, ec);
    if (ec) throw fail(fmt::format("cannot create the folder ({})", ec.message()));
    if (!fs::is_directory(cfg.log_dir, ec)) throw fail("is not a folder");
    if (::access(cfg.log_dir.c_str(), W_OK | X_OK) != 0) {
      throw fail(fmt::format("cannot write in the folder ({})", std::strerror(errno)));
    }
  }
  if (!cfg.event_log.empty()) {
    const int fd = ::open(cfg.event_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      throw config::UsageError(fmt::format("--event_log={}: cannot append to the file ({})", shown(cfg.event_log),
                                           std::strerror(errno)));
    }
    ::close(fd);
  }
}

// Private folders ("ddprun.<pid namespace>.<pid>.<run id>-XXXXXX") of this user's ddprun
// processes, in this PID namespace, that are gone: a ddprun SIGKILLed before its orphan guard
// existed could not have it remove its folder.
void remove_stale_private_folders(const std::string& tmp) {
  const std::string prefix = "ddprun." + launcher::pid_namespace() + ".";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat st;
    if (launcher::dead_pid_in_name(name, prefix) == 0 || name.find('.', prefix.size()) == std::string::npos ||
        ::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) {
      continue;
    }
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

// Where log files go, and the private folder: for the workers' own files when there is no log
// folder, and for Python workers' faulthandler answers.
launcher::RunPaths make_run_paths(const config::LaunchConfig& cfg, const std::string& run_id,
                                  const std::map<std::string, std::string>& vars) {
  launcher::RunPaths paths;
  const TempParent tmp = temp_parent(cfg, vars);
  // A new folder in `parent` whose name starts with `stem` (mkdtemp's six random characters
  // follow); `setting` names where `parent` came from in the error.
  const auto make_unique = [](const std::string& parent, const std::string& stem, const std::string& setting) {
    std::string pattern = parent + "/" + stem + "XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw config::UsageError(fmt::format("{}: cannot create a folder there ({})", setting, std::strerror(errno)));
    }
    return pattern;
  };
  const auto make_temp = [&](const std::string& stem) { return make_unique(tmp.path, stem + "-", tmp.setting); };
  if (!cfg.log_dir.empty()) {
    // One folder per run, <run id>_<random>/ as torchrun 2.x makes it: a second run with the
    // same --log_dir never overwrites the logs of the first.
    paths.logs_root = make_unique(cfg.log_dir, path_safe(run_id) + "_", fmt::format("--log_dir={}", shown(cfg.log_dir)));
    paths.log_everything = true;
    std::cerr << fmt::format("ddprun: worker logs in {}\n", paths.logs_root);
  } else if (cfg.redirects.any() || cfg.tee.any() || cfg.duplicates_lines()) {
    paths.logs_root = make_temp("ddprun-logs-" + path_safe(run_id));
    std::cerr << fmt::format("ddprun: worker logs in {}\n", paths.logs_root);
  }
  // Beside a log folder too for Python workers: where their faulthandler answers, which only
  // ddprun reads (stacks.txt of the log folder gets them).
  if (paths.logs_root.empty() || (cfg.progress && cfg.python_workers())) {
    paths.private_root = make_temp(fmt::format("ddprun.{}.{}.{}", launcher::pid_namespace(), ::getpid(), path_safe(run_id)));
  }
  return paths;
}

int run(int argc, char** argv) {
  // `ddprun status ...` and `ddprun report ...` only as the first argument: `ddprun
  // --nproc_per_node=2 status` and `ddprun ./status` run a program named status.
  if (argc >= 2 && std::string_view(argv[1]) == launcher::kStatusCommand) {
    return launcher::status_command(std::vector<std::string>(argv + 2, argv + argc), std::cout);
  }
  if (argc >= 2 && std::string_view(argv[1]) == launcher::kReportCommand) {
    return launcher::report_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
  }
  const auto command_line = launcher::parse_command_line(argc, argv);
  if (!command_line) return exit_code::kSuccess;
  launcher::raise_file_limit();
  auto vars = read_environment();
#ifdef DDPRUN_BESIDE_A_PYTHON
  default_python_beside(vars);
#endif
  config::ResolveContext context;
  context.environ = vars;
  context.cpu_count = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  config::OptionSources sources;
  sources.cli = command_line->options;
  if (!command_line->config_file.empty()) {
    sources.file = config::options_from_json_file(command_line->config_file);
  }
  sources.env = config::options_from_environment(vars);
  const slurm::SlurmInference slurm_job = slurm::infer_from_slurm(vars);
  sources.inferred = config::options_from_slurm(slurm_job, sources);
  config::LaunchConfig cfg = config::resolve_config(sources, command_line->program_and_args, context);
  if (command_line->print_config) {
    // Replaced, not thrown: values are the user's bytes, which need not be UTF-8.
    std::cout << config::to_json(cfg).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return exit_code::kSuccess;
  }
  elastic::RendezvousConfig rendezvous_config = launcher::rendezvous_config_for(cfg, vars, std::cerr);
  // Read once; from here on neither this process's environment nor the workers' holds it.
  vars.erase(env::kRdzvSecret);
  ::unsetenv(env::kRdzvSecret);
  if (cfg.multi_node()) {
    const std::string said = elastic::decide_auth(rendezvous_config, slurm_job.in_slurm ? slurm_job.job_id : "",
                                                  get(vars, "SLURM_CONF", "/etc/slurm/slurm.conf"));
    if (!said.empty()) std::cerr << said << "\n";
  }
  check_program(cfg, vars);
  check_user_paths(cfg, vars);
  if (slurm_job.in_slurm) {
    // Where the nodes meet; on one node, MASTER_ADDR[:MASTER_PORT] (no port: a free one).
    const elastic::Endpoint at = cfg.multi_node() ? elastic::rendezvous_endpoint(rendezvous_config)
                                                  : elastic::single_node_master(rendezvous_config);
    std::cerr << slurm::describe(slurm_job, at.port > 0 ? fmt::format("{}:{}", at.host, at.port) : at.host) << "\n";
  }

  const std::string& run_id = rendezvous_config.run_id;
  if (launcher::sets_omp_num_threads(vars, cfg)) {
    std::cerr << fmt::format(
        "ddprun: setting OMP_NUM_THREADS=1 for each of the {} workers to avoid overloading the "
        "machine; set it yourself to tune\n", cfg.nproc_per_node);
  }

  // Order matters: the guard is forked before any worker or thread, signals are blocked before
  // any thread, and orphaned grandchildren are reparented to ddprun so it can reap them.
  // The folders and the cgroup exist before the guard, which removes them if ddprun is killed.
  // The job's snapshot folder first: a folder ddprun may not use stops the launch before any other
  // folder exists.
  auto snapshots = launcher::SnapshotDir::open(cfg, run_id, vars, std::cerr);
  auto paths = make_run_paths(cfg, run_id, vars);
  paths.snapshot_dir = snapshots.path();
  const std::string cgroup = launcher::Containment::planned_path(vars);
  // The private folders of dead ddprun processes (and their empty snapshot folders) are removed by
  // the guard, off the start's path.
  auto guard = launcher::OrphanGuard::start(cgroup, paths.private_root, [&] {
    if (!paths.private_root.empty()) remove_stale_private_folders(std::filesystem::path(paths.private_root).parent_path());
    launcher::SnapshotDir::remove_stale(snapshots.path());
    if (!cgroup.empty()) launcher::Containment::remove_stale(cgroup);
  }, {snapshots.lock_descriptor()});
  auto containment = launcher::Containment::create(cgroup);
  launcher::Agent::block_signals(cfg.debug);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  asio::io_context io;
  // The snapshot folder of a job of several nodes is copied to the other nodes' (its threads
  // start after the signals are blocked); the join tells the others where it listens.
  std::unique_ptr<elastic::SnapshotReplication> replication;
  if (cfg.multi_node() && !snapshots.path().empty()) {
    // Authenticated as the rendezvous is (its secret or MUNGE), or not copied at all.
    std::string said;
    const auto auth = elastic::decide_replication_auth(rendezvous_config, slurm_job.in_slurm ? slurm_job.job_id : "",
                                                       get(vars, "SLURM_CONF", "/etc/slurm/slurm.conf"), said);
    if (!said.empty()) std::cerr << said << "\n";
    if (auth) {
      try {
        replication = elastic::make_snapshot_replication(
            snapshots.path(), *auth, cfg.snapshot_replicas,
            [&io](const std::string& line) { asio::post(io, [line] { launcher::say("ddprun: " + line + "\n"); }); });
      } catch (const std::runtime_error& e) {  // no libcrypto, no port to listen on, munged gone
        throw UserError(fmt::format("the snapshot folder's replication: {}", e.what()), exit_code::kRendezvous);
      }
      rendezvous_config.snapshot_node = replication->node();
      rendezvous_config.snapshot_port = replication->port();
    }
  }
  auto rendezvous = elastic::make_rendezvous(io, rendezvous_config);
  launcher::Agent agent(io, std::move(cfg), vars, std::move(rendezvous), guard, *containment, snapshots,
                        replication.get(), std::move(paths));
  return agent.run();
}

}  // namespace

// A standard descriptor that ddprun was started without (`ddprun ... 1>&-`) is opened on /dev/null
// first: otherwise the first file ddprun opens takes its number, and what is meant for the console
// (or a worker's stdin) goes to that file, or a worker's descriptors are shuffled onto it.
static void open_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int opened = ::open("/dev/null", O_RDWR);  // the lowest free number: fd
      if (opened > 2) ::close(opened);
    }
  }
}

int main(int argc, char** argv) {
  open_standard_descriptors();
  try {
    return run(argc, argv);
  } catch (const CannotStart& e) {
    std::cerr << "ddprun: " << e.what() << "\n";
    return e.exit_code();
  } catch (const UserError& e) {
    // Messages quote values shortened already; this keeps the promise of one line whatever
    // a message holds (CLI11's quote arguments as given).
    std::cerr << "ddprun: error: " << shown(e.what(), 1000) << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "ddprun: internal error: " << shown(e.what(), 1000) << "\n";
    return exit_code::kInternal;
  }
}
