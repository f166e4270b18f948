// The launch configuration: every source merged in precedence order, then one resolve step per
// group of options (the groups of --help), each parsing and checking its values, then the checks
// that span groups. The option table, the reading of the sources and --print_config are in
// options.cpp, the grammars of the values in parse.cpp and option_values.cpp, the GPU probes in
// gpu_probe.cpp.
#include "ddprun/launch_config.hpp"

#include <algorithm>
#include <random>
#include <cctype>
#include <initializer_list>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/chaos_spec.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/parse.hpp"
#include "ddprun/progress_pattern.hpp"
#include "ddprun/rdzv_backend.hpp"
#include "ddprun/line_prefix.hpp"
#include "ddprun/worker_env.hpp"
#include "option_values.hpp"

namespace ddprun::config {

int StreamSelection::mask_for(int local_rank) const {
  const auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? all : it->second;
}

bool StreamSelection::any() const {
  return all != 0 ||
         std::any_of(per_rank.begin(), per_rank.end(), [](const auto& kv) { return kv.second != 0; });
}

bool LaunchConfig::runs_python() const {
  if (no_python) return false;
  if (module || run_path) return true;
  return program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0;
}

bool python_interpreter_name(std::string_view file_name) {
  return file_name.compare(0, 6, "python") == 0 && file_name.find_first_not_of("0123456789.", 6) == std::string::npos;
}

bool LaunchConfig::python_workers() const {
  return runs_python() || python_interpreter_name(std::string_view(program).substr(program.rfind('/') + 1));
}

std::vector<std::string> LaunchConfig::worker_argv(const std::string& python) const {
  std::vector<std::string> argv;
  if (runs_python()) {
    argv = {python, "-u"};
    if (module) argv.push_back("-m");
  }
  argv.push_back(program);
  argv.insert(argv.end(), program_args.begin(), program_args.end());
  return argv;
}

PythonInterpreter python_interpreter(const std::map<std::string, std::string>& environ) {
  const auto chosen = [&](const char* name) -> const std::string* {
    const auto it = environ.find(name);
    return it != environ.end() && !it->second.empty() ? &it->second : nullptr;
  };
  if (const auto* python = chosen(env::kPythonExec)) return {*python, "set by PYTHON_EXEC"};
  if (const auto* python = chosen(env::kDefaultPython)) return {*python, "the Python ddprun was installed with"};
  return {"python3", "the first python3 in PATH"};
}

namespace {

std::string flag_name(const std::string& key) { return "--" + key; }

// The options merged, each from the source of highest precedence that gives it, and read with
// the one grammar of its kind of value (parse.hpp).
class MergedOptions {
 public:
  MergedOptions(const OptionSources& sources, const std::map<std::string, std::string>& environ) {
    for (const auto& spec : option_specs()) {
      if (spec.default_text != nullptr) values_[spec.key] = spec.default_text;
    }
    if (auto it = environ.find(env::kShutdownTimeout); it != environ.end()) {
      values_["shutdown_timeout"] = it->second;
      variables_["shutdown_timeout"] = env::kShutdownTimeout;
    }
    if (auto it = environ.find(kLogLinePrefixTemplate); it != environ.end() && !it->second.empty()) {
      values_["log_line_prefix"] = it->second;
      variables_["log_line_prefix"] = kLogLinePrefixTemplate;
    }
    for (const RawOptions* source : {&sources.inferred, &sources.env, &sources.file, &sources.cli}) {
      for (const auto& [key, value] : *source) {
        values_[key] = value;
        if (source == &sources.env) {
          std::string variable = env::kPetPrefix + key;
          std::transform(variable.begin(), variable.end(), variable.begin(), ::toupper);
          variables_[key] = variable;
        } else {
          variables_.erase(key);
        }
      }
    }
  }

  // A message about "--key=VALUE" whose value came from a variable (PET_KEY) names the variable:
  // the user looks for it in the environment, not on the command line.
  std::string attributed(const std::string& message) const {
    if (message.rfind("--", 0) != 0) return message;
    const std::size_t end = message.find_first_of("=: ", 2);
    if (end == std::string::npos) return message;
    const auto variable = variables_.find(message.substr(2, end - 2));
    return variable == variables_.end() ? message : variable->second + message.substr(end);
  }

  bool has(const std::string& key) const { return values_.count(key) > 0; }
  // "" when no source and no default sets it.
  std::string text(const std::string& key) const { return has(key) ? values_.at(key) : std::string(); }
  // Unset or empty (PET_STANDALONE=, --standalone=) is false, as it has always been.
  bool flag(const std::string& key) const { return !text(key).empty() && parse_bool(flag_name(key), text(key)); }
  int integer(const std::string& key, int min, int max, const char* accepted) const {
    return parse_integer(flag_name(key), text(key), min, max, accepted);
  }
  double seconds(const std::string& key, Zero zero) const { return parse_seconds(flag_name(key), text(key), zero); }
  // The value, one of `words` ("" among them where unset is allowed).
  std::string word(const std::string& key, std::initializer_list<std::string_view> words) const {
    const std::string value = text(key);
    parse_choice(flag_name(key), value, words);
    return value;
  }
  std::string host(const std::string& key) const {
    const std::string value = text(key);
    if (value.empty() || value.size() > kMaxHostChars) {
      throw bad_value(flag_name(key), value,
                      fmt::format("a host name or address (at most {} characters)", kMaxHostChars));
    }
    return value;
  }

 private:
  RawOptions values_;
  std::map<std::string, std::string> variables_;  // key -> the variable its value came from
};

void resolve_nodes(const MergedOptions& m, LaunchConfig& c) {
  c.standalone = m.flag("standalone");
  std::tie(c.min_nodes, c.max_nodes) = parse_nnodes(m.text("nnodes"));
  if (m.has("node_rank")) {
    c.node_rank = m.integer("node_rank", 0, 1 << 20, "a node rank 0 or more");
    if (c.node_rank >= c.max_nodes) {
      throw UsageError(fmt::format("--node_rank={}: must be less than --nnodes ({}), i.e. 0..{}", c.node_rank,
                                   c.max_nodes, c.max_nodes - 1));
    }
  }
  c.master_addr = m.host("master_addr");
  if (m.has("master_port")) c.master_port = m.integer("master_port", 1, 65535, "a port in 1..65535");
  if (!m.text("local_addr").empty()) c.local_addr = m.host("local_addr");
}

void resolve_rendezvous(const MergedOptions& m, LaunchConfig& c) {
  c.rdzv_backend = m.text("rdzv_backend");
  if (c.rdzv_backend == "etcd-v2") {
    throw UsageError(
        "--rdzv_backend=etcd-v2: etcd's v2 API is gone from etcd 3.6 on (and off by default since 3.4); use "
        "--rdzv_backend=etcd, which speaks etcd's v3 API");
  }
  if (!parse_rdzv_backend(c.rdzv_backend)) {
    throw bad_value("--rdzv_backend", c.rdzv_backend,
                    "static, c10d (both served by ddprun itself) or etcd (etcd's v3 API)");
  }
  c.rdzv_endpoint = m.text("rdzv_endpoint");
  c.rdzv_id = m.text("rdzv_id");
  if (c.rdzv_id.size() > 256 ||
      std::any_of(c.rdzv_id.begin(), c.rdzv_id.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; })) {
    throw bad_value("--rdzv_id", c.rdzv_id, "a job id of at most 256 printable characters");
  }
  c.rdzv_conf = m.text("rdzv_conf");  // elastic/ parses it
}

// How a failure ends in a restart or the end of the job, and how workers are stopped.
void resolve_supervision(const MergedOptions& m, LaunchConfig& c) {
  c.debug = m.flag("debug");
  c.max_restarts = m.integer("max_restarts", 0, 1 << 30, "a number of restarts, 0 or more");
  c.restart_on_any = m.word("restart_on", {"retryable", "any"}) == "any";
  if (m.has("restart_window")) c.restart_window = m.seconds("restart_window", Zero::kRefused);
  c.restart_backoff_max = m.seconds("restart_backoff_max", Zero::kAllowed);
  c.crash_loop_limit = m.integer("crash_loop_limit", 0, 1 << 30, "a number of failures, 0 (never) or more");
  c.failure_rules = parse_failure_rules(m.text("failure_rules"));
  c.monitor_interval = m.seconds("monitor_interval", Zero::kRefused);
  c.shutdown_timeout = m.seconds("shutdown_timeout", Zero::kAllowed);
  c.health_check = m.text("health_check");
  c.health_check_timeout = m.seconds("health_check_timeout", Zero::kRefused);
  c.role = m.text("role");
  if (c.role.empty()) throw UsageError("--role: expected a non-empty role name");
  c.signals_to_handle = m.text("signals_to_handle");
  c.stop_signals = parse_signals(c.signals_to_handle);
}

// When a worker counts as hung, and what counts as its progress.
void resolve_hangs(const MergedOptions& m, LaunchConfig& c) {
  c.hang_timeout = parse_hang_timeout(m.text("hang_timeout"));
  c.hang_timeout.startup = m.seconds("hang_startup", Zero::kRefused);
  c.progress = parse_bool("--progress", m.text("progress"));
  // Checked here, so that a bad pattern stops the launch before anything starts.
  const std::string patterns = m.text("progress_pattern");
  for (std::size_t at = 0; !patterns.empty() && at <= patterns.size();) {
    const std::size_t end = std::min(patterns.find('\n', at), patterns.size());
    c.progress_patterns.push_back(ProgressPattern(patterns.substr(at, end - at)).text());
    at = end + 1;
  }
}

void resolve_output(const MergedOptions& m, LaunchConfig& c) {
  c.log_dir = m.text("log_dir");
  c.redirects = parse_streams("--redirects", m.text("redirects"));
  c.tee = parse_streams("--tee", m.text("tee"));
  c.log_line_prefix = m.text("log_line_prefix");
  check_line_prefix("--log_line_prefix", c.log_line_prefix);
  c.event_log = m.text("event_log");
  c.result_file = m.text("result_file");
  c.duplicate_stdout_filters = parse_filters(m.text("duplicate_stdout_filters"));
  c.duplicate_stderr_filters = parse_filters(m.text("duplicate_stderr_filters"));
  check_python_plugin("logs_specs", m.text("logs_specs"), "plug-in of torchrun's, which ddprun cannot load", "default",
                      "ddprun keeps its own log layout: --log_dir, --redirects, --tee");
  check_python_plugin("event_log_handler", m.text("event_log_handler"),
                      "event handler of torchrun's, which ddprun cannot run", "null",
                      "ddprun writes each event as a JSON line with --event_log FILE");
  c.output_stall_timeout = m.seconds("output_stall_timeout", Zero::kRefused);
  if (m.has("status_port")) c.status_port = m.integer("status_port", 0, 65535, "a port in 0..65535 (0: a free one)");
  c.status_addr = m.host("status_addr");
}

// The job's folder in memory (launcher/snapshots/).
void resolve_snapshots(const MergedOptions& m, LaunchConfig& c) {
  const auto on = to_bool(m.text("snapshot"));
  if (!on) throw bad_value("--snapshot", m.text("snapshot"), "on or off (or true/false, 1/0, yes/no)");
  c.snapshot = *on;
  if (!m.text("snapshot_dir_size").empty()) {
    c.snapshot_dir_size = parse_size("--snapshot_dir_size", m.text("snapshot_dir_size"), kMinSnapshotDirSize);
  }
  c.snapshot_keep = m.flag("snapshot_keep");
  c.snapshot_signal = parse_snapshot_signal(m.text("snapshot_signal"));
  c.snapshot_grace = m.seconds("snapshot_grace", Zero::kRefused);
  std::string replicas = m.text("snapshot_replicas");
  std::transform(replicas.begin(), replicas.end(), replicas.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (replicas != "all") {
    c.snapshot_replicas =
        m.integer("snapshot_replicas", 1, 1 << 20, "all, or a number of nodes that hold each file's copies, 1 or more");
  }
  if (c.snapshot_signal != 0 && !c.snapshot) {
    throw UsageError(fmt::format("--snapshot_signal={}: the dying gasp saves into DDPRUN_SNAPSHOT_DIR, which "
                                 "--snapshot=off turns off; drop one of them",
                                 shown(m.text("snapshot_signal"))));
  }
}

void resolve_program(const MergedOptions& m, const std::vector<std::string>& program_and_args, LaunchConfig& c) {
  c.module = m.flag("module");
  c.no_python = m.flag("no_python");
  c.run_path = m.flag("run_path");
  c.start_method = m.word("start_method", {"spawn", "fork", "forkserver"});
  const std::string warm = m.text("warm_start");
  if (warm == "auto") {
    c.warm_start = LaunchConfig::WarmStart::kAuto;
  } else if (const auto on = to_bool(warm)) {
    c.warm_start = *on ? LaunchConfig::WarmStart::kOn : LaunchConfig::WarmStart::kOff;
  } else {
    throw bad_value("--warm_start", warm, "auto, on or off (or true/false, 1/0, yes/no)");
  }
  if (m.has("preload")) {
    c.preload = m.text("preload");
    const bool module_names = std::all_of(c.preload.begin(), c.preload.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == ',';
    });
    if (!module_names || c.preload.empty() || c.preload.front() == ',' || c.preload.back() == ',' ||
        c.preload.find(",,") != std::string::npos) {
      throw UsageError(fmt::format("--preload={}: expected Python module names separated by commas (numpy,my.pkg)",
                                   shown(c.preload)));
    }
  }
  if (c.module && c.no_python) {
    throw UsageError("-m/--module and --no_python cannot be used together: a module needs the Python interpreter");
  }
  if (!program_and_args.empty()) {
    c.program = program_and_args.front();
    c.program_args.assign(program_and_args.begin() + 1, program_and_args.end());
  } else if (m.has("program")) {
    c.program = m.text("program");
    // options_from_json_file() checked it: an array of strings.
    if (m.has("args")) c.program_args = nlohmann::json::parse(m.text("args")).get<std::vector<std::string>>();
  }
  if (c.program.empty()) {
    throw UsageError("missing PROGRAM: usage is ddprun [options] PROGRAM [ARGS...] (see ddprun --help)");
  }
}

// --standalone and --debug set options of other groups, and refuse what contradicts them.
void apply_modes(const MergedOptions& m, const OptionSources& sources, LaunchConfig& c) {
  if (c.standalone) {
    if (c.max_nodes > 1) {
      throw UsageError(fmt::format("--standalone runs one node; drop --nnodes={} or --standalone", m.text("nnodes")));
    }
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id.clear();
  }
  c.nproc_spec = m.text("nproc_per_node");
  if (c.debug) {
    if (c.max_nodes > 1) throw UsageError("--debug runs one worker on one node; drop --nnodes");
    if (sources.given("nproc_per_node") && c.nproc_spec != "1") {
      throw UsageError(fmt::format("--debug runs one worker; drop --nproc_per_node={}", shown(c.nproc_spec)));
    }
    c.nproc_spec = "1";
    c.max_restarts = 0;
  }
}

int resolve_nproc(const std::string& text, ResolveContext& context) {
  const auto gpus = [&] {
    if (!context.gpu_count) context.gpu_count = count_gpus(context.environ);
    return *context.gpu_count;
  };
  if (text == "cpu") return std::max(1, context.cpu_count);
  if (text == "gpu") {
    const int n = gpus();
    if (n == 0) {
      throw UsageError(
          "--nproc_per_node=gpu: no GPU visible (nvidia-smi -L and /proc/driver/nvidia/gpus list "
          "none, or CUDA_VISIBLE_DEVICES hides them); use a number, cpu or auto");
    }
    return n;
  }
  if (text == "auto") {
    const int n = gpus();
    return n > 0 ? n : std::max(1, context.cpu_count);
  }
  return parse_integer("--nproc_per_node", text, 1, 1 << 20, "a number of workers (1 or more), gpu, cpu or auto");
}

// Last: the number of workers is known only after --debug, and the GPUs are counted only if needed.
void resolve_workers(const MergedOptions& m, ResolveContext& context, LaunchConfig& c) {
  c.nproc_per_node = resolve_nproc(c.nproc_spec, context);
  c.virtual_local_rank = m.flag("virtual_local_rank");
  if (const auto visible = context.environ.find(env::kCudaVisibleDevices);
      c.virtual_local_rank && visible != context.environ.end()) {
    const auto gpus = split_device_list(visible->second);
    if (static_cast<int>(gpus.size()) < c.nproc_per_node) {
      throw UsageError(fmt::format(
          "--virtual_local_rank: CUDA_VISIBLE_DEVICES={} lists {} GPU(s) for {} workers; each worker needs its own "
          "entry (or leave CUDA_VISIBLE_DEVICES unset: local rank N gets GPU N)",
          shown(visible->second), gpus.size(), c.nproc_per_node));
    }
  }
  c.numa_binding = m.word("numa_binding", {"", "node", "socket", "exclusive", "core-complex"});
  if (!m.text("local_ranks_filter").empty()) {
    c.local_ranks_filter = parse_rank_list("--local_ranks_filter", m.text("local_ranks_filter"), c.nproc_per_node);
  }
}

// --chaos (launcher/chaos/): last, as it is checked against the restarts, hangs and nodes.
void resolve_chaos(const MergedOptions& m, LaunchConfig& c) {
  c.chaos = parse_chaos(m.text("chaos"));
  if (!c.chaos.on()) return;
  const std::string given = "--chaos=" + shown(m.text("chaos"));
  if (c.debug) throw UsageError(given + ": --debug runs one worker without restarts; drop one of them");
  if (c.max_restarts < 1) {
    throw UsageError(given + ": a rehearsal injects failures for the job to recover from, which --max_restarts=0 "
                             "(the default, as torchrun's) forbids: give --max_restarts=N, N of 1 or more");
  }
  if (c.chaos.hang && !c.hang_timeout.enabled()) {
    throw UsageError(given + ": kinds=hang stops a worker, which only hang detection finds: give --hang_timeout "
                             "(a few seconds more than a step, e.g. --hang_timeout=10)");
  }
  if (c.chaos.node && !c.multi_node()) {
    throw UsageError(given + ": kinds=node kills a node's ddprun, which needs --nnodes of more than 1 (and a node "
                             "to take its place: a hot spare, an elastic --nnodes=MIN:MAX or a scheduler's)");
  }
  if (!c.chaos.seed_given) {
    // Every node of a job draws from the same seed, so that their specs agree (and a requeue
    // with the same --rdzv_id replays the same faults); one node from a new one each run.
    c.chaos.seed = c.multi_node() ? chaos_seed_of(c.rdzv_id) : std::random_device{}() >> 1;
  }
}

LaunchConfig resolve(const MergedOptions& merged, const OptionSources& sources,
                     const std::vector<std::string>& program_and_args, ResolveContext& context) {
  LaunchConfig c;
  resolve_nodes(merged, c);
  resolve_rendezvous(merged, c);
  resolve_supervision(merged, c);
  resolve_hangs(merged, c);
  resolve_output(merged, c);
  resolve_snapshots(merged, c);
  resolve_program(merged, program_and_args, c);
  apply_modes(merged, sources, c);
  resolve_workers(merged, context, c);
  resolve_chaos(merged, c);
  return c;
}

}  // namespace

LaunchConfig resolve_config(const OptionSources& sources, const std::vector<std::string>& program_and_args,
                            ResolveContext& context) {
  const MergedOptions merged(sources, context.environ);
  try {
    return resolve(merged, sources, program_and_args, context);
  } catch (const UsageError& e) {
    throw UsageError(merged.attributed(e.what()));
  }
}

}  // namespace ddprun::config
