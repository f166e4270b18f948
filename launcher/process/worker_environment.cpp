#include "process/worker_environment.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "ddprun/worker_env.hpp"

namespace ddprun::launcher {

namespace fs = std::filesystem;

namespace {

// NCCL's async error handling, whose name changed in PyTorch 2.2. A name the user set is
// inherited; the new one, when they did not set it, takes the old one's value when they set that
// (they meant it, whichever PyTorch reads it), else "1". The old name only when the worker cannot
// choose for itself (`worker_chooses`: ddprun's Python bootstrap sets it for torch < 2.2): PyTorch
// 2.2 and later warn about it.
void set_nccl_async_error_handling(const std::map<std::string, std::string>& base,
                                   std::map<std::string, std::string>& vars, bool worker_chooses) {
  const auto inherited = [&](const char* name) -> const std::string* {
    const auto it = base.find(name);
    return it == base.end() ? nullptr : &it->second;
  };
  const std::string* current = inherited(env::kNcclAsyncErrorHandling);
  const std::string* old = inherited(env::kNcclAsyncErrorHandlingOld);
  const std::string value = current != nullptr ? *current : old != nullptr ? *old : "1";
  vars.emplace(env::kNcclAsyncErrorHandling, value);
  if (!worker_chooses) vars.emplace(env::kNcclAsyncErrorHandlingOld, value);
}

// torchrun's virtual local rank: the worker's entry of ddprun's CUDA_VISIBLE_DEVICES (resolve_config
// checked that it has one), else its local rank.
std::string own_gpu(const std::map<std::string, std::string>& base, int local_rank) {
  const auto visible = base.find(env::kCudaVisibleDevices);
  if (visible == base.end()) return std::to_string(local_rank);
  const std::vector<std::string> gpus = config::split_device_list(visible->second);
  return local_rank < static_cast<int>(gpus.size()) ? gpus[local_rank] : std::to_string(local_rank);
}

}  // namespace

std::string python_bootstrap_folder() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path folder = exe.parent_path().parent_path() / "share" / "ddprun" / "python";
  return fs::exists(folder / "sitecustomize.py", ec) ? folder.string() : "";
}

char python_option_without_bootstrap(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") return 0;  // the script, stdin's "-", or the end of options
    if (arg[1] == '-') {
      if (arg == "--check-hash-based-pycs") ++i;  // its value is the next argument
      continue;
    }
    for (std::size_t at = 1; at < arg.size(); ++at) {
      const char option = arg[at];
      if (option == 'I' || option == 'E' || option == 'S') return option;
      if (option == 'c' || option == 'm') return 0;  // what follows is the program
      if (option == 'W' || option == 'X') {          // they take a value: the rest of the word, or the next
        if (at + 1 == arg.size()) ++i;
        break;
      }
    }
  }
  return 0;
}

std::string without_bootstrap_line(char option) {
  const char* what = option == 'I'   ? "isolated mode, which ignores PYTHONPATH"
                     : option == 'E' ? "which ignores PYTHON* variables, PYTHONPATH among them"
                                     : "which skips site, and so every sitecustomize";
  return fmt::format(
      "ddprun: python -{} ({}): ddprun's bootstrap does not load in these workers, so without code of "
      "their own their progress is not counted (--hang_timeout finds no beat: use --progress_pattern or beat "
      "DDPRUN_HEARTBEAT_FILE) and their Python stacks need py-spy\n",
      option, what);
}

bool sets_omp_num_threads(const std::map<std::string, std::string>& base,
                          const config::LaunchConfig& config) {
  return base.count(env::kOmpNumThreads) == 0 && config.nproc_per_node > 1;
}

// The job's snapshot folder, the same for every worker; an inherited one (a ddprun started by a
// worker of another) is never the workers'.
void set_snapshot_dir(std::map<std::string, std::string>& vars, const std::string& snapshot_dir) {
  vars.erase(env::kSnapshotDir);
  if (!snapshot_dir.empty()) vars[env::kSnapshotDir] = snapshot_dir;
}

std::vector<std::string> zygote_environment(const std::map<std::string, std::string>& base,
                                            const config::LaunchConfig& config, const std::string& python_bootstrap,
                                            const std::string& snapshot_dir) {
  std::map<std::string, std::string> vars = base;
  vars.erase(env::kDefaultPython);
  vars.erase(env::kPySpy);
  vars.erase(env::kRdzvSecret);
  set_snapshot_dir(vars, snapshot_dir);
  if (!python_bootstrap.empty()) {
    const auto inherited = base.find(env::kPythonPath);
    const bool has = inherited != base.end() && !inherited->second.empty();
    vars[env::kPythonPath] = python_bootstrap + (has ? ":" + inherited->second : "");
  }
  if (sets_omp_num_threads(base, config)) vars[env::kOmpNumThreads] = "1";
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

std::vector<std::string> worker_environment(const std::map<std::string, std::string>& base,
                                            const config::LaunchConfig& config,
                                            const elastic::RoundAssignment& round, int local_rank,
                                            const WorkerFiles& files) {
  std::map<std::string, std::string> vars = base;
  vars.erase(env::kDefaultPython);  // a ddprun started by a worker makes its own choice
  vars.erase(env::kPySpy);
  vars.erase(env::kRdzvSecret);     // the launchers' secret, not the workers'
  const int rank = round.base_rank + local_rank;
  vars[env::kRank] = std::to_string(rank);
  vars[env::kLocalRank] = config.virtual_local_rank ? "0" : std::to_string(local_rank);
  if (config.virtual_local_rank) vars[env::kCudaVisibleDevices] = own_gpu(base, local_rank);
  vars[env::kGroupRank] = std::to_string(round.group_rank);
  vars[env::kRoleRank] = std::to_string(rank);  // one role per job: role ranks are global ranks
  vars[env::kRoleName] = config.role;
  vars[env::kRoleWorldSize] = std::to_string(round.world_size);
  vars[env::kLocalWorldSize] = std::to_string(config.nproc_per_node);
  vars[env::kWorldSize] = std::to_string(round.world_size);
  vars[env::kGroupWorldSize] = std::to_string(round.group_world_size);
  vars[env::kMasterAddr] = round.master_addr;
  vars[env::kMasterPort] = std::to_string(round.master_port);
  vars[env::kRestartCount] = std::to_string(round.restart_count);
  vars[env::kMaxRestarts] = std::to_string(config.max_restarts);
  vars[env::kRunId] = round.run_id;
  vars[env::kSignalsToHandle] = config.signals_to_handle;
  vars[env::kUseAgentStore] = round.agent_store ? "True" : "False";
  vars[env::kErrorFile] = files.error_file;
  if (!files.heartbeat_file.empty()) vars[env::kHeartbeatFile] = files.heartbeat_file;
  if (!files.timer_file.empty()) vars[env::kTimerFile] = files.timer_file;
  set_snapshot_dir(vars, files.snapshot_dir);
  if (!files.python_bootstrap.empty()) {
    const auto inherited = base.find(env::kPythonPath);
    const bool has = inherited != base.end() && !inherited->second.empty();
    vars[env::kPythonPath] = files.python_bootstrap + (has ? ":" + inherited->second : "");
    if (!files.python_stacks.empty()) {
      vars[env::kPythonStacksFile] = files.python_stacks;
      vars[env::kPythonStacksSignal] = std::to_string(env::python_stacks_signal());
    }
  }
  set_nccl_async_error_handling(base, vars, !files.python_bootstrap.empty());
  if (sets_omp_num_threads(base, config)) vars[env::kOmpNumThreads] = "1";

  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

}  // namespace ddprun::launcher
