// The option table, the options as the environment (PET_*) and a --config JSON file give them,
// before they are merged and validated (launch_config.cpp), and a resolved configuration written
// back as the table says (to_json, --print_config).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/input_limits.hpp"
#include "ddprun/launch_config.hpp"
#include "ddprun/system.hpp"
#include "ddprun/worker_env.hpp"
#include "option_values.hpp"

namespace ddprun::config {
namespace {

constexpr OptionKind kText = OptionKind::kText;
constexpr OptionKind kFlag = OptionKind::kFlag;
constexpr OptionKind kList = OptionKind::kList;
constexpr OptionKind kJson = OptionKind::kJson;

// Each row's printer: what --print_config writes for the option.
using json = nlohmann::json;
using Config = const LaunchConfig&;
json nullable(const std::string& text) { return text.empty() ? json() : json(text); }

// A size as parse_size() reads it back: in the largest unit that divides it ("4G", "1536M").
std::string size_text(unsigned long long bytes) {
  const char* units = "KMGT";
  int unit = -1;
  while (unit < 3 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return unit < 0 ? std::to_string(bytes) : std::to_string(bytes) + units[unit];
}

const std::vector<OptionSpec> kOptions = {
    {"nproc_per_node", nullptr, kText, "1", "Workers",
     "workers on this node: a number, 'gpu' (one per visible GPU), 'cpu' (one per core) or "
     "'auto' (GPUs if any, else cores)",
     [](Config c) -> json { return c.nproc_per_node; }},
    {"virtual_local_rank", nullptr, kFlag, nullptr, "Workers",
     "every worker sees LOCAL_RANK=0 and, in CUDA_VISIBLE_DEVICES, only its own GPU (its entry of "
     "ddprun's CUDA_VISIBLE_DEVICES, else its local rank)",
     [](Config c) -> json { return c.virtual_local_rank; }},
    {"numa_binding", nullptr, kText, nullptr, "Workers",
     "bind each worker to the CPUs and memory near its GPU (the one its local rank names): node, "
     "socket, exclusive or core-complex, as torchrun; skipped, with one line, without GPUs",
     [](Config c) -> json { return nullable(c.numa_binding); }},
    {"nnodes", nullptr, kText, "1", "Nodes", "number of nodes, or MIN:MAX for an elastic job",
     [](Config c) -> json { return nnodes_text(c.min_nodes, c.max_nodes); }},
    {"node_rank", nullptr, kText, nullptr, "Nodes",
     "this node's rank, 0..nnodes-1 (default: assigned by the rendezvous)",
     [](Config c) -> json { return c.node_rank >= 0 ? json(c.node_rank) : json(); }},
    {"master_addr", nullptr, kText, "127.0.0.1", "Nodes",
     "address of the node hosting rank 0 (static rendezvous)",
     [](Config c) -> json { return c.master_addr; }},
    {"master_port", nullptr, kText, nullptr, "Nodes",
     "port on master_addr (default: a free port)",
     [](Config c) -> json { return c.master_port > 0 ? json(c.master_port) : json(); }},
    {"local_addr", nullptr, kText, nullptr, "Nodes",
     "address other nodes reach this node at (default: its host name)",
     [](Config c) -> json { return nullable(c.local_addr); }},
    {"standalone", nullptr, kFlag, nullptr, "Nodes",
     "single-node job with a private rendezvous on a free port",
     [](Config c) -> json { return c.standalone; }},
    {"rdzv_backend", nullptr, kText, "static", "Rendezvous", "static or c10d (both served by ddprun), or etcd",
     [](Config c) -> json { return c.rdzv_backend; }},
    {"rdzv_endpoint", nullptr, kText, nullptr, "Rendezvous",
     "host[:port] of the rendezvous (c10d's default port 29400); with static it replaces "
     "--master_addr:--master_port, and on one node it is the workers' MASTER_ADDR:MASTER_PORT",
     [](Config c) -> json { return nullable(c.rdzv_endpoint); }},
    {"rdzv_id", nullptr, kText, nullptr, "Rendezvous",
     "job id shared by all nodes of one job (default: generated on a single node)",
     [](Config c) -> json { return nullable(c.rdzv_id); }},
    {"rdzv_conf", nullptr, kText, nullptr, "Rendezvous",
     "k=v,... : join_timeout, last_call_timeout, close_timeout, heartbeat_timeout, ...",
     [](Config c) -> json { return nullable(c.rdzv_conf); }},
    {"max_restarts", nullptr, kText, "0", "Supervision",
     "restarts of the whole job after a worker failure",
     [](Config c) -> json { return c.max_restarts; }},
    {"restart_on", nullptr, kText, "retryable", "Supervision",
     "retryable: a failure a restart cannot fix (syntax_error, import_error, the same Python "
     "exception twice with no progress between) ends the job at once; any: restart it anyway",
     [](Config c) -> json { return c.restart_on_any ? "any" : "retryable"; }},
    {"restart_window", nullptr, kText, nullptr, "Supervision",
     "SECONDS: --max_restarts counts only the restarts within the last SECONDS (a job that fails "
     "once a day survives a month with --max_restarts=3 --restart_window=86400)",
     [](Config c) -> json { return c.restart_window > 0 ? json(c.restart_window) : json(); }},
    {"restart_backoff_max", nullptr, kText, "60", "Supervision",
     "after a failure with no progress since the workers started, wait 1, 2, 4 ... seconds, at most "
     "this many, before restarting (0: no wait)",
     [](Config c) -> json { return c.restart_backoff_max; }},
    {"crash_loop_limit", nullptr, kText, "5", "Supervision",
     "stop with \"crash loop\" after this many failures in a row with no progress since their "
     "start (0: never)",
     [](Config c) -> json { return c.crash_loop_limit; }},
    {"failure_rules", nullptr, kJson, nullptr, "Supervision",
     "JSON array of {\"pattern\": REGEX, \"kind\": NAME, \"retryable\": true|false}: a failed "
     "worker whose last stderr lines or error message match gets that kind (first match, before "
     "ddprun's own rules); usually a --config key",
     [](Config c) -> json { return json::parse(failure_rules_json(c.failure_rules)); }},
    {"monitor_interval", nullptr, kText, "0.1", "Supervision",
     "accepted for torchrun compatibility; ddprun reacts to exits at once",
     [](Config c) -> json { return c.monitor_interval; }},
    {"shutdown_timeout", nullptr, kText, "30", "Supervision",
     "seconds between SIGTERM and SIGKILL when stopping workers",
     [](Config c) -> json { return c.shutdown_timeout; }},
    {"health_check", nullptr, kText, nullptr, "Supervision",
     "CMD (run by /bin/sh -c) before this node joins each round, the first and every one after a "
     "stop: exit 0 joins; 1 makes the node leave the job as quarantined (exit 71); any other end, "
     "or --health_check_timeout, warns and joins",
     [](Config c) -> json { return nullable(c.health_check); }},
    {"health_check_timeout", nullptr, kText, "60", "Supervision",
     "seconds the health check may take; then its process group is killed and the node joins "
     "with a warning",
     [](Config c) -> json { return c.health_check_timeout; }},
    {"signals_to_handle", nullptr, kText, "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "Supervision",
     "signals that are forwarded to the workers and then stop the job (also SIGUSR1, SIGUSR2: "
     "unlisted, those are forwarded only and the job goes on); TORCHELASTIC_SIGNALS_TO_HANDLE",
     [](Config c) -> json { return c.signals_to_handle; }},
    {"debug", nullptr, kFlag, nullptr, "Supervision",
     "one worker in the foreground with the terminal, world size 1, no restarts "
     "(ddprun --debug gdb --args ./train)",
     [](Config c) -> json { return c.debug; }},
    {"role", nullptr, kText, "default", "Supervision", "worker role name (ROLE_NAME)",
     [](Config c) -> json { return c.role; }},
    {"hang_timeout", nullptr, kText, "off", "Supervision",
     "a worker whose heartbeat (DDPRUN_HEARTBEAT_FILE) is older than this many seconds is hung: "
     "its stacks are saved and the job restarts; 'auto' learns it from the beats (auto:MIN_SECONDS "
     "sets its least value, default 30); 'off'",
     [](Config c) -> json { return hang_timeout_json(c.hang_timeout); }},
    {"hang_startup", nullptr, kText, "600", "Supervision",
     "with --hang_timeout: seconds a worker may take to its first heartbeat",
     [](Config c) -> json { return c.hang_timeout.startup; }},
    {"chaos", nullptr, kText, "off", "Supervision",
     "rehearse failures, as mtbf=SECONDS,kinds=kill,hang,node,seed=N: ddprun injects faults at random "
     "times SECONDS apart on average (kill: SIGKILL a worker, hang: SIGSTOP one, node: kill this node's "
     "ddprun), each recorded as injected; every node must ask for the same; needs --max_restarts; off",
     [](Config c) -> json { return chaos_text(c.chaos); }},
    {"progress", nullptr, kText, "on", "Supervision",
     "on: a Python worker's progress (its modules' forward passes and optimizer steps, through "
     "PyTorch's global hooks) is its heartbeat, with no change to its code; off",
     [](Config c) -> json { return c.progress ? "on" : "off"; }},
    {"progress_pattern", nullptr, kList, nullptr, "Supervision",
     "REGEX (repeatable): a line of a worker's output that matches is its progress, like a "
     "heartbeat; a group (?<step>[0-9]+) gives the step number",
     [](Config c) -> json { return c.progress_patterns; }},
    {"log_dir", nullptr, kText, nullptr, "Output",
     "also keep attempt_N/rank_R/{stdout,stderr}.log here",
     [](Config c) -> json { return nullable(c.log_dir); }},
    {"redirects", "-r", kText, "0", "Output",
     "send worker output to log files only: 1 stdout, 2 stderr, 3 both; or per local rank 0:1,1:2",
     [](Config c) -> json { return streams_text(c.redirects); }},
    {"tee", "-t", kText, "0", "Output", "send worker output to log files and console; same format",
     [](Config c) -> json { return streams_text(c.tee); }},
    {"log_line_prefix", nullptr, kText, "[rank${rank}]: ", "Output",
     "the console's prefix of each worker line: ${rank}, ${local_rank} and ${role_name} are "
     "replaced, as in torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (read when this is not "
     "given); empty: no prefix",
     [](Config c) -> json { return c.log_line_prefix; }},
    {"local_ranks_filter", nullptr, kText, nullptr, "Output",
     "show only these local ranks on the console, e.g. 0,1 (log files keep all)",
     [](Config c) -> json { return c.local_ranks_filter ? json(rank_list_text(*c.local_ranks_filter)) : json(); }},
    {"duplicate_stdout_filters", nullptr, kText, nullptr, "Output",
     "with --log_dir: stdout lines containing any of these comma-separated strings (,, for a comma) "
     "also go to attempt_N/filtered_stdout.log, with their rank prefix",
     [](Config c) -> json { return nullable(filters_text(c.duplicate_stdout_filters)); }},
    {"duplicate_stderr_filters", nullptr, kText, nullptr, "Output",
     "the same for stderr, into attempt_N/filtered_stderr.log",
     [](Config c) -> json { return nullable(filters_text(c.duplicate_stderr_filters)); }},
    {"logs_specs", nullptr, kText, nullptr, "Output",
     "accepted for torchrun compatibility: only 'default' (a Python LogsSpecs class cannot shape "
     "ddprun's logs; see --log_dir)",
     // Only its default is accepted, which is also what unset means: nothing to keep.
     [](Config) -> json { return json(); }},
    {"event_log_handler", nullptr, kText, "null", "Output",
     "accepted for torchrun compatibility: only 'null' (ddprun writes its events with --event_log)",
     // Only 'null' is accepted: the one value there is.
     [](Config) -> json { return "null"; }},
    {"output_stall_timeout", nullptr, kText, "30", "Output",
     "seconds the console or a log file may take nothing before worker output for it is dropped "
     "(a slower one only slows the workers down)",
     [](Config c) -> json { return c.output_stall_timeout; }},
    {"event_log", nullptr, kText, nullptr, "Output", "append one JSON object a line for each event of the job to this file",
     [](Config c) -> json { return nullable(c.event_log); }},
    {"result_file", nullptr, kText, nullptr, "Output",
     "at exit, write the job's result to this file as JSON: exit code, failure kind, retryable, root "
     "cause, restarts (for a requeue script)",
     [](Config c) -> json { return nullable(c.result_file); }},
    {"status_port", nullptr, kText, nullptr, "Output",
     "serve GET /healthz and GET /status on this port (0: a free one, printed)",
     [](Config c) -> json { return c.status_port >= 0 ? json(c.status_port) : json(); }},
    {"status_addr", nullptr, kText, "127.0.0.1", "Output", "address the status server listens on",
     [](Config c) -> json { return c.status_addr; }},
    {"snapshot", nullptr, kText, "on", "Snapshots",
     "on: every worker gets DDPRUN_SNAPSHOT_DIR, a folder in memory (tmpfs) made for the job on this "
     "node, kept across worker failures, restarts and rounds, removed when the job succeeds and kept "
     "when it fails (for a requeue with the same --rdzv_id, e.g. SLURM's job id); off: none",
     [](Config c) -> json { return c.snapshot ? "on" : "off"; }},
    {"snapshot_dir_size", nullptr, kText, nullptr, "Snapshots",
     "SIZE (512M, 4G): the most DDPRUN_SNAPSHOT_DIR may hold, a tmpfs of its own where ddprun may mount "
     "one (root): a write past it fails with ENOSPC; where it may not, said at start (default: the "
     "room of the file system it is on, /dev/shm's)",
     [](Config c) -> json { return c.snapshot_dir_size > 0 ? json(size_text(c.snapshot_dir_size)) : json(); }},
    {"snapshot_keep", nullptr, kFlag, nullptr, "Snapshots",
     "keep DDPRUN_SNAPSHOT_DIR after the job succeeds too (remove it yourself: it holds memory)",
     [](Config c) -> json { return c.snapshot_keep; }},
    {"snapshot_signal", nullptr, kText, "off", "Snapshots",
     "SIG (SIGUSR1, USR1 or its number): a dying gasp: when a worker fails (here or on another node), "
     "the surviving workers of this node get this signal and --snapshot_grace to save into "
     "DDPRUN_SNAPSHOT_DIR before they are stopped; off: none",
     [](Config c) -> json { return c.snapshot_signal != 0 ? json(signal_name(c.snapshot_signal)) : json("off"); }},
    {"snapshot_grace", nullptr, kText, "5", "Snapshots",
     "seconds the dying gasp of --snapshot_signal waits for the surviving workers to save and end "
     "on their own; then they are stopped",
     [](Config c) -> json { return c.snapshot_grace; }},
    {"snapshot_replicas", nullptr, kText, "all", "Snapshots",
     "all: every file committed to DDPRUN_SNAPSHOT_DIR is copied to the folder of every node of the "
     "job; K (1 or more): held by the K next nodes of the ring only, shown in its own node's folder, "
     "and shown to the node that takes over its group rank after a loss (K of nodes-1 or more: all)",
     [](Config c) -> json { return c.snapshot_replicas > 0 ? json(c.snapshot_replicas) : json("all"); }},
    {"module", "-m", kFlag, nullptr, "Program", "run PROGRAM as a Python module (python -m)",
     [](Config c) -> json { return c.module; }},
    {"no_python", nullptr, kFlag, nullptr, "Program",
     "execute PROGRAM directly even if it ends in .py",
     [](Config c) -> json { return c.no_python; }},
    {"run_path", nullptr, kFlag, nullptr, "Program", "accepted for torchrun compatibility: runs the script under Python",
     [](Config c) -> json { return c.run_path; }},
    {"start_method", nullptr, kText, "spawn", "Program",
     "accepted for torchrun compatibility: spawn, fork or forkserver (workers are always separate programs)",
     [](Config c) -> json { return c.start_method; }},
    {"warm_start", nullptr, kText, "auto", "Program",
     "auto: a restart's and a hot spare's Python workers (a .py PROGRAM or -m) are forked from a "
     "warm interpreter that imported torch, torch.distributed and torch._dynamo once the first "
     "workers made progress (a spare: while it waits); on: every start's, the interpreter made "
     "while ddprun starts; off: every worker starts cold",
     [](Config c) -> json {
       return c.warm_start == LaunchConfig::WarmStart::kAuto ? "auto"
              : c.warm_start == LaunchConfig::WarmStart::kOn ? "on"
                                                             : "off";
     }},
    {"preload", nullptr, kText, nullptr, "Program",
     "MODULE,...: modules the warm interpreter of --warm_start imports after torch",
     [](Config c) -> json { return c.preload.empty() ? json() : json(c.preload); }},
};

const OptionSpec* find_spec(const std::string& key) {
  for (const auto& spec : kOptions) {
    if (key == spec.key) return &spec;
  }
  return nullptr;
}

std::string underscored(std::string key) {
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

}  // namespace

const std::vector<OptionSpec>& option_specs() { return kOptions; }

RawOptions options_from_environment(const std::map<std::string, std::string>& environ) {
  RawOptions options;
  const std::string prefix = env::kPetPrefix;
  for (const auto& [name, value] : environ) {
    if (name.rfind(prefix, 0) != 0) continue;
    std::string key = name.substr(prefix.size());
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    if (find_spec(key) != nullptr) options[key] = value;
  }
  return options;
}

namespace {

// The file's bytes, at most kMaxConfigFileBytes. Every failure names --config and the path:
// the path is the user's, so its problems are usage errors.
std::string read_config_file(const std::string& path, const std::string& where) {
  const auto fail = [&](const std::string& problem) { return UsageError(fmt::format("{}: {}", where, problem)); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("cannot open the file ({})", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw fail("is a folder; expected a JSON file of options");
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw fail(fmt::format("cannot read the file ({})", std::strerror(error)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxConfigFileBytes) {
      ::close(fd);
      throw fail(fmt::format("larger than {} bytes; expected a small JSON object of options", kMaxConfigFileBytes));
    }
  }
  ::close(fd);
  return text;
}

struct TooDeep {};

}  // namespace

RawOptions options_from_json_file(const std::string& path) {
  const std::string where = fmt::format("--config {}", shown(path));
  const std::string text = read_config_file(path, where);
  nlohmann::json doc;
  try {
    // The parser itself keeps its own stack, but a tree 100,000 deep overflows the stack when it
    // is destroyed: refuse it while parsing, before it is built.
    doc = nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > kMaxJsonDepth) throw TooDeep{};
      return true;
    });
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw UsageError(fmt::format("{}: not valid JSON ({})", where, shown(e.what(), 200)));
  } catch (const TooDeep&) {
    throw UsageError(fmt::format("{}: nested deeper than {} levels; expected a JSON object of options", where,
                                 kMaxJsonDepth));
  }
  if (!doc.is_object()) {
    throw UsageError(fmt::format("{}: expected a JSON object of options", where));
  }
  RawOptions options;
  for (const auto& [raw_key, value] : doc.items()) {
    const std::string key = underscored(raw_key);
    if (key == "program") {
      if (!value.is_string()) throw UsageError(fmt::format("{}: \"program\" must be a string", where));
      options[key] = value.get<std::string>();
      continue;
    }
    if (key == "args") {
      if (!value.is_array() || !std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_string(); })) {
        throw UsageError(fmt::format("{}: \"args\" must be an array of strings", where));
      }
      options[key] = value.dump();
      continue;
    }
    const OptionSpec* spec = find_spec(key);
    if (spec == nullptr) {
      throw UsageError(fmt::format(
          "{}: unknown key \"{}\" (keys are ddprun's option names, e.g. "
          "\"nproc_per_node\"; see ddprun --help)",
          where, shown(raw_key)));
    }
    if (value.is_null()) continue;
    if (spec->kind == kJson) {
      options[key] = value.is_string() ? value.get<std::string>() : value.dump();
      continue;
    }
    if (spec->kind == kList && value.is_array()) {
      std::string lines;
      for (const auto& item : value) {
        if (!item.is_string()) throw UsageError(fmt::format("{}: \"{}\" must be a string or an array of strings", where, raw_key));
        if (!lines.empty()) lines += '\n';
        lines += item.get<std::string>();
      }
      options[key] = lines;
      continue;
    }
    if (value.is_boolean()) {
      options[key] = value.get<bool>() ? "1" : "0";
    } else if (value.is_number_integer()) {
      options[key] = value.dump();  // exact, for unsigned and negative numbers alike
    } else if (value.is_number()) {
      options[key] = fmt::format("{}", value.get<double>());
    } else if (value.is_string()) {
      options[key] = value.get<std::string>();
    } else {
      throw UsageError(fmt::format("{}: \"{}\" must be a string, number or boolean", where, raw_key));
    }
  }
  return options;
}

nlohmann::json to_json(const LaunchConfig& config) {
  nlohmann::json j;
  for (const auto& spec : kOptions) j[spec.key] = spec.print(config);
  j["program"] = config.program;
  j["args"] = config.program_args;
  return j;
}

}  // namespace ddprun::config
