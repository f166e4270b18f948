// One validated launch configuration, whatever it came from.
//
// Every option ddprun accepts is declared once, in option_specs(): the command line, the
// PET_<OPTION> environment variables, the --config JSON file and --print_config all use that
// table. resolve_config() merges the sources (command line > --config file > PET_* > default),
// checks every value and returns a LaunchConfig, or throws UsageError naming the option.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ddprun/chaos_spec.hpp"
#include "ddprun/failure_rules.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::config {

// kList: repeatable; its raw value holds the values given, one a line. kJson: JSON text on the
// command line and in PET_*, any JSON value in a --config file (kept as its text).
enum class OptionKind { kText, kFlag, kList, kJson };

struct LaunchConfig;

struct OptionSpec {
  // Every field is required: a row of the table without its printer does not compile.
  using Print = nlohmann::json (*)(const LaunchConfig&);
  OptionSpec(const char* key, const char* short_flag, OptionKind kind, const char* default_text, const char* group,
             const char* help, Print print)
      : key(key), short_flag(short_flag), kind(kind), default_text(default_text), group(group), help(help),
        print(print) {}

  const char* key;          // underscore spelling: --key, --key-with-dashes, JSON key, PET_KEY
  const char* short_flag;   // e.g. "-m", or nullptr
  OptionKind kind;
  const char* default_text; // shown in --help and used when no source sets it; nullptr: unset
  const char* group;        // --help section
  const char* help;
  // The option's value in a resolved configuration as --print_config writes it (null: unset),
  // which resolve_config() reads back the same from a --config file.
  Print print;
};

// All options, in --help order.
const std::vector<OptionSpec>& option_specs();

// Option values as written, keyed by OptionSpec::key. Flags hold "1" or "0".
using RawOptions = std::map<std::string, std::string>;

// The PET_<KEY> variables of `environ` that name a known option.
RawOptions options_from_environment(const std::map<std::string, std::string>& environ);

// The options in a --config file: a JSON object keyed by option (either spelling). Throws
// UsageError if the file is missing, not JSON, or has an unknown key or a value of the wrong type.
RawOptions options_from_json_file(const std::string& path);

// Which standard streams of a worker go to its log files instead of (--redirects) or as well
// as (--tee) the console: torchrun's bitmask, 1 = stdout, 2 = stderr, 3 = both.
struct StreamSelection {
  int all = 0;                    // applies to local ranks not in per_rank
  std::map<int, int> per_rank;    // local rank -> mask
  int mask_for(int local_rank) const;
  bool any() const;
};

// --hang_timeout: when a worker that stopped beating counts as hung (launcher/hangs/watchdog.hpp).
struct HangTimeout {
  enum class Mode { kOff, kFixed, kAuto };
  Mode mode = Mode::kOff;
  double seconds = 0;  // kFixed: the timeout; kAuto: the least timeout learned (0: the default)
  double startup = 600;  // --hang_startup: the most a rank may take to its first beat
  bool enabled() const { return mode != Mode::kOff; }
};

struct LaunchConfig {
  // Workers on this node.
  std::string nproc_spec = "1";   // as given: a number, auto, cpu or gpu
  int nproc_per_node = 1;
  // --virtual_local_rank: LOCAL_RANK=0 and only its own GPU in each worker's CUDA_VISIBLE_DEVICES.
  bool virtual_local_rank = false;
  // --numa_binding: empty (none), or node, socket, exclusive, core-complex (numa_binding.hpp).
  std::string numa_binding;
  // Nodes.
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;             // -1: not given
  std::string master_addr = "127.0.0.1";
  int master_port = 0;            // 0: a free port is picked
  bool standalone = false;
  // Rendezvous.
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id;            // empty: generated per launch
  std::string rdzv_conf;          // torchrun's k=v,k=v; parsed by elastic/
  std::string local_addr;
  // Supervision.
  int max_restarts = 0;
  // The restart policy (docs/guides/failures.md): --restart_on=any
  // restarts also what a restart cannot fix; --restart_backoff_max caps the wait before a restart
  // after a failure with no progress; --crash_loop_limit such failures in a row end the job (0:
  // never); --restart_window: max_restarts counts only the restarts of the last this many
  // seconds (0: all of them).
  bool restart_on_any = false;
  double restart_backoff_max = 60;
  int crash_loop_limit = 5;
  double restart_window = 0;
  std::vector<FailureRule> failure_rules;  // --failure_rules
  double monitor_interval = 0.1;  // accepted for compatibility; monitoring is event-driven
  double shutdown_timeout = 30;   // SIGTERM -> SIGKILL grace period, seconds
  // --health_check: a shell command run before the node joins each round (launcher/health_check.hpp);
  // empty: none. --health_check_timeout: seconds it may take.
  std::string health_check;
  double health_check_timeout = 60;
  bool debug = false;
  std::string role = "default";
  // --signals_to_handle as given (the workers' TORCHELASTIC_SIGNALS_TO_HANDLE), and as numbers:
  // those that stop the job after being forwarded to the workers.
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  std::set<int> stop_signals;
  HangTimeout hang_timeout;
  // --progress: ddprun's progress module in Python workers (launcher/python_bootstrap/), on by default.
  bool progress = true;
  // --progress_pattern (repeatable): output lines that count as progress (progress_pattern.hpp).
  std::vector<std::string> progress_patterns;
  // Output.
  std::string log_dir;
  StreamSelection redirects;
  StreamSelection tee;
  std::optional<std::set<int>> local_ranks_filter;  // console shows only these local ranks
  // --log_line_prefix (or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE): the console prefix's template,
  // line_prefix.hpp; empty: none.
  std::string log_line_prefix = "[rank${rank}]: ";
  // --duplicate_std{out,err}_filters: lines containing one of these also go to
  // attempt_N/filtered_std{out,err}.log (torchrun's comma-separated list, ",," for a comma).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::string event_log;          // JSON lines of the job's events; empty: none
  std::string result_file;        // the job's result as JSON, written at exit; empty: none
  double output_stall_timeout = 30;  // seconds a reader may take nothing before output for it is dropped
  int status_port = -1;           // -1: no status server; 0: a free port
  std::string status_addr = "127.0.0.1";
  // Snapshots (launcher/snapshots/): --snapshot, the job's folder in memory that outlives its
  // workers (DDPRUN_SNAPSHOT_DIR), on by default; --snapshot_dir_size, its cap in bytes (0: none
  // but its file system's); --snapshot_keep, kept after a success too.
  bool snapshot = true;
  unsigned long long snapshot_dir_size = 0;
  bool snapshot_keep = false;
  // --snapshot_signal: the dying gasp's signal, sent to a failure's surviving workers before they
  // are stopped (0: off, the default); --snapshot_grace: the seconds they get to save and end.
  int snapshot_signal = 0;
  double snapshot_grace = 5;
  // --snapshot_replicas: 0 (all, the default): every committed file copied to every node's
  // folder; K: held by the K next nodes of the ring, shown on its own node (elastic/src/replica/).
  int snapshot_replicas = 0;
  // --chaos: the failure rehearsal (chaos_spec.hpp; launcher/chaos/); off by default. Its seed is
  // always set once resolved (chosen when not given).
  ChaosSpec chaos;
  // The program.
  bool module = false;            // -m: PROGRAM is a Python module
  bool no_python = false;
  bool run_path = false;
  std::string start_method = "spawn";
  // --warm_start: Python workers forked from a warm interpreter (launcher/process/warm_start.hpp):
  // auto (restarts only, the interpreter made once the workers progress), on (every start, made
  // while ddprun starts), off. --preload: the modules it imports after torch and
  // torch.distributed, comma-separated.
  enum class WarmStart { kOff, kAuto, kOn };
  WarmStart warm_start = WarmStart::kAuto;
  std::string preload;
  std::string program;
  std::vector<std::string> program_args;

  bool multi_node() const { return max_nodes > 1; }
  // True when the workers may start again in this run: restarts allowed, an elastic size, or a
  // job of several nodes on a rendezvous that takes hot spares (c10d, etcd): a lost node's place
  // is taken by a spare in a new round without using --max_restarts, and a spare's workers start
  // in a later round than the job's first.
  bool may_restart() const {
    return max_restarts > 0 || min_nodes < max_nodes || (max_nodes > 1 && rdzv_backend != "static");
  }
  // True when lines are copied to the filtered logs (which then need a log folder).
  bool duplicates_lines() const { return !duplicate_stdout_filters.empty() || !duplicate_stderr_filters.empty(); }
  // True when PROGRAM runs under the Python interpreter (a .py file, or -m), as torchrun does.
  bool runs_python() const;
  // True when the workers are Python programs: runs_python(), or PROGRAM is a Python
  // interpreter (python, python3, python3.11, by name or path; ddprun --no_python python3 x.py).
  bool python_workers() const;
  // The argv each worker execs. `python` is python_interpreter()'s.
  std::vector<std::string> worker_argv(const std::string& python) const;
};

// Whether a program's file name (no folder) is a Python interpreter's: "python", "python3",
// "python3.11" ("python" and digits and dots), not "python-config" nor "ipython".
bool python_interpreter_name(std::string_view file_name);

// The interpreter that runs a Python PROGRAM, and where that choice came from (for messages):
// PYTHON_EXEC; else DDPRUN_DEFAULT_PYTHON, the Python the pip-installed ddprun belongs to; else
// python3 from PATH.
struct PythonInterpreter {
  std::string program;
  std::string chosen_by;  // e.g. "the first python3 in PATH"
};
PythonInterpreter python_interpreter(const std::map<std::string, std::string>& environ);

// Counts GPUs without linking CUDA: nvidia-smi -L, else /proc/driver/nvidia/gpus, then
// narrowed by CUDA_VISIBLE_DEVICES when set. 0 when there are none.
int count_gpus(const std::map<std::string, std::string>& environ);

// How many of `physical` GPUs a CUDA program sees under CUDA_VISIBLE_DEVICES=`visible`
// (unset: all). CUDA stops at the first entry that names no device: "0,1" gives 2, "" and
// "-1" give 0, "1,-1,0" gives 1.
int visible_gpu_count(int physical, const std::optional<std::string>& visible);

// CUDA_VISIBLE_DEVICES' entries as torchrun's --virtual_local_rank splits it (and
// --signals_to_handle's names): at commas, spaces around each removed ("0, 2" gives "0" and "2";
// "" gives one empty entry, "a," two).
std::vector<std::string> split_device_list(const std::string& visible);

struct ResolveContext {
  std::map<std::string, std::string> environ;  // the launcher's environment
  int cpu_count = 1;
  std::optional<int> gpu_count;                // counted lazily when unset and needed
};

// Where option values come from, lowest precedence first.
struct OptionSources {
  RawOptions inferred;  // from the surroundings (SLURM): below anything the user gave
  RawOptions env;       // PET_* variables
  RawOptions file;      // --config
  RawOptions cli;       // the command line
  // Whether the user gave `key` (on the command line, in the file or as PET_*).
  bool given(const std::string& key) const {
    return cli.count(key) > 0 || file.count(key) > 0 || env.count(key) > 0;
  }
};

// Merges and validates. `program_and_args` is everything from the program on. Throws UsageError.
LaunchConfig resolve_config(const OptionSources& sources,
                            const std::vector<std::string>& program_and_args,
                            ResolveContext& context);

// The effective configuration, keyed like a --config file (plus "program" and "args").
nlohmann::json to_json(const LaunchConfig& config);

}  // namespace ddprun::config
