// The launch configuration: every source merged in precedence order, each value parsed and
// checked, the whole validated (resolve_config), and written back as JSON (to_json). The option
// table and the reading of the sources are in options.cpp, the GPU probes in gpu_probe.cpp.
#include "ddprun/launch_config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/input_limits.hpp"
#include "ddprun/progress_pattern.hpp"
#include "ddprun/rdzv_backend.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun::config {
namespace {

std::string flag_name(const std::string& key) { return "--" + key; }

int parse_int(const std::string& key, const std::string& text, int min, int max,
              const char* accepted) {
  const auto fail = [&] {
    return UsageError(fmt::format("{}={}: expected {}", flag_name(key), shown(text), accepted));
  };
  if (text.empty()) throw fail();
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || !std::isdigit(static_cast<unsigned char>(text.back())))
    throw fail();
  if (value < min || value > max) throw fail();
  return static_cast<int>(value);
}

// A number of seconds, at most kMaxTimeoutSeconds: inf, nan and 1e308 are refused, never
// turned into a timer that overflows and fires at once.
double parse_seconds(const std::string& key, const std::string& text, bool allow_zero) {
  const auto fail = [&] {
    return UsageError(fmt::format("{}={}: expected a number of seconds {}, {}", flag_name(key), shown(text),
                                  allow_zero ? "(0 or more)" : "greater than 0", kMaxTimeoutText));
  };
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !(value >= 0) || (!allow_zero && value == 0) ||
      !(value <= kMaxTimeoutSeconds))
    throw fail();
  return value;
}

// "off", "auto", "auto:FLOOR" or a number of seconds greater than 0 (at most kMaxTimeoutSeconds).
HangTimeout parse_hang_timeout(const std::string& text) {
  HangTimeout t;
  if (text == "off") return t;
  const auto fail = [&] {
    return UsageError(fmt::format(
        "--hang_timeout={}: expected a number of seconds greater than 0 and {}, auto, auto:MIN_SECONDS or off",
        shown(text), kMaxTimeoutText));
  };
  std::string number = text;
  if (text.rfind("auto", 0) == 0) {
    t.mode = HangTimeout::Mode::kAuto;
    if (text == "auto") return t;
    if (text[4] != ':') throw fail();
    number = text.substr(5);
  } else {
    t.mode = HangTimeout::Mode::kFixed;
  }
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || errno != 0 || *end != '\0' || !(value > 0) || !(value <= kMaxTimeoutSeconds)) throw fail();
  t.seconds = value;
  return t;
}

bool parse_flag(const std::string& key, const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off" || lower.empty())
    return false;
  throw UsageError(fmt::format("{}={}: expected 1/0 or true/false", flag_name(key), shown(text)));
}

// "0".."3", or LOCAL_RANK:MASK,... Parsed by hand: std::regex recurses once per character and
// overflowed the stack on a long list.
StreamSelection parse_streams(const std::string& key, const std::string& text) {
  const auto fail = [&] {
    return UsageError(fmt::format(
        "{}={}: expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or per local rank like 0:1,1:3",
        flag_name(key), shown(text)));
  };
  const auto is_mask = [](char c) { return c >= '0' && c <= '3'; };
  StreamSelection selection;
  if (text.size() == 1 && is_mask(text[0])) {
    selection.all = text[0] - '0';
    return selection;
  }
  std::size_t i = 0;
  do {
    if (i > 0) ++i;  // the ','
    int rank = 0;
    const std::size_t begin = i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (i - begin >= 7) throw fail();  // local ranks are below 1 << 20
      rank = rank * 10 + (text[i] - '0');
    }
    if (i == begin || i + 1 >= text.size() || text[i] != ':' || !is_mask(text[i + 1])) throw fail();
    selection.per_rank[rank] = text[i + 1] - '0';
    i += 2;
  } while (i < text.size() && text[i] == ',');
  if (i != text.size()) throw fail();
  return selection;
}

std::set<int> parse_rank_list(const std::string& key, const std::string& text, int nproc) {
  std::set<int> ranks;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    ranks.insert(parse_int(key, item, 0, nproc - 1,
                           fmt::format("local ranks 0..{} separated by commas", nproc - 1).c_str()));
  }
  if (ranks.empty()) {
    throw UsageError(fmt::format("{}={}: expected local ranks separated by commas, e.g. 0,1",
                                 flag_name(key), shown(text)));
  }
  return ranks;
}

// torchrun's comma_separated_list: items split at ',', with ",," for a literal comma. Empty text
// is no filter at all (torchrun's default, an empty list).
std::vector<std::string> parse_filters(const std::string& text) {
  std::vector<std::string> items;
  if (text.empty()) return items;
  std::string item;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else {
      items.push_back(std::move(item));
      item.clear();
    }
  }
  items.push_back(std::move(item));
  return items;
}

// The signals ddprun can take over from torchrun's --signals_to_handle: those its signal channel
// receives (launcher/process/signal_channel.hpp).
const std::map<std::string, int>& handled_signal_names() {
  static const std::map<std::string, int> names = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},
                                                   {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
  return names;
}

// Names separated by commas, spaces around them ignored, as torchrun strips them.
std::set<int> parse_signals(const std::string& text) {
  std::set<int> signals;
  for (const std::string& name : split_device_list(text)) {
    const auto it = handled_signal_names().find(name);
    if (it == handled_signal_names().end()) {
      throw UsageError(fmt::format(
          "--signals_to_handle={}: {} is not a signal ddprun handles; expected names among SIGTERM, SIGINT, "
          "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 separated by commas",
          shown(text), name.empty() ? "an empty name" : shown(name)));
    }
    signals.insert(it->second);
  }
  return signals;
}

// --logs_specs and --event_log_handler name Python plug-ins of torchrun's: their default values
// are accepted, anything else is refused with what ddprun does instead.
void check_python_plugin(const std::string& key, const std::string& value, const char* what, const char* accepted,
                         const char* instead) {
  if (value.empty() || value == accepted) return;
  throw UsageError(fmt::format("--{}={}: names a Python {}; only '{}' is accepted ({})", key, shown(value), what,
                               accepted, instead));
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
  return parse_int("nproc_per_node", text, 1, 1 << 20,
                   "a number of workers (1 or more), gpu, cpu or auto");
}

}  // namespace

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

LaunchConfig resolve(const OptionSources& sources, const std::vector<std::string>& program_and_args,
                     ResolveContext& context);

// A message about "--key=VALUE" whose value came from a PET_KEY variable names the variable:
// the user looks for it in the environment, not on the command line.
std::string attributed(const std::string& message, const OptionSources& sources) {
  if (message.rfind("--", 0) != 0) return message;
  const std::size_t end = message.find_first_of("=: ", 2);
  if (end == std::string::npos) return message;
  const std::string key = message.substr(2, end - 2);
  if (sources.cli.count(key) > 0 || sources.file.count(key) > 0 || sources.env.count(key) == 0) return message;
  std::string variable = env::kPetPrefix + key;
  std::transform(variable.begin(), variable.end(), variable.begin(), ::toupper);
  return variable + message.substr(end);
}

}  // namespace

LaunchConfig resolve_config(const OptionSources& sources, const std::vector<std::string>& program_and_args,
                            ResolveContext& context) {
  try {
    return resolve(sources, program_and_args, context);
  } catch (const UsageError& e) {
    throw UsageError(attributed(e.what(), sources));
  }
}

namespace {

LaunchConfig resolve(const OptionSources& sources, const std::vector<std::string>& program_and_args,
                     ResolveContext& context) {
  RawOptions merged;
  for (const auto& spec : option_specs()) {
    if (spec.default_text != nullptr) merged[spec.key] = spec.default_text;
  }
  if (auto it = context.environ.find(env::kShutdownTimeout); it != context.environ.end())
    merged["shutdown_timeout"] = it->second;
  for (const RawOptions* source : {&sources.inferred, &sources.env, &sources.file, &sources.cli}) {
    for (const auto& [key, value] : *source) merged[key] = value;
  }
  const auto has = [&](const char* key) { return merged.count(key) > 0; };
  const auto text = [&](const char* key) { return has(key) ? merged.at(key) : std::string(); };
  const auto flag = [&](const char* key) { return has(key) && parse_flag(key, merged.at(key)); };

  LaunchConfig c;
  c.nproc_spec = text("nproc_per_node");
  c.debug = flag("debug");
  c.standalone = flag("standalone");

  const std::string nnodes = text("nnodes");
  const auto node_count = [&](const std::string& part) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char ch) { return std::isdigit(ch); });
    if (!digits) {
      throw UsageError(fmt::format("--nnodes={}: expected a number of nodes N or MIN:MAX", shown(nnodes)));
    }
    const auto n = part.size() <= 8 ? std::stol(part) : 0L;
    if (n < 1 || n > (1 << 20)) {
      throw UsageError(fmt::format("--nnodes={}: expected 1 or more nodes (at most {}), as N or MIN:MAX",
                                   shown(nnodes), 1 << 20));
    }
    return static_cast<int>(n);
  };
  const auto colon = nnodes.find(':');
  c.min_nodes = node_count(nnodes.substr(0, colon));
  c.max_nodes = colon == std::string::npos ? c.min_nodes : node_count(nnodes.substr(colon + 1));
  if (c.min_nodes > c.max_nodes) {
    throw UsageError(fmt::format("--nnodes={}: MIN is larger than MAX; expected MIN:MAX with MIN <= MAX", nnodes));
  }
  if (has("node_rank")) {
    c.node_rank = parse_int("node_rank", text("node_rank"), 0, 1 << 20, "a node rank 0 or more");
    if (c.node_rank >= c.max_nodes) {
      throw UsageError(fmt::format("--node_rank={}: must be less than --nnodes ({}), i.e. 0..{}",
                                   c.node_rank, c.max_nodes, c.max_nodes - 1));
    }
  }
  const auto host = [&](const char* key) {
    std::string value = text(key);
    if (value.empty() || value.size() > kMaxHostChars) {
      throw UsageError(fmt::format("{}={}: expected a host name or address (at most {} characters)", flag_name(key),
                                   shown(value), kMaxHostChars));
    }
    return value;
  };
  c.master_addr = host("master_addr");
  if (has("master_port")) {
    c.master_port = parse_int("master_port", text("master_port"), 1, 65535, "a port in 1..65535");
  }
  if (has("local_addr") && !text("local_addr").empty()) c.local_addr = host("local_addr");

  c.rdzv_backend = text("rdzv_backend");
  if (c.rdzv_backend == "etcd-v2") {
    throw UsageError(
        "--rdzv_backend=etcd-v2: etcd's v2 API is gone from etcd 3.6 on (and off by default since 3.4); use "
        "--rdzv_backend=etcd, which speaks etcd's v3 API");
  }
  if (!parse_rdzv_backend(c.rdzv_backend)) {
    throw UsageError(fmt::format(
        "--rdzv_backend={}: expected static, c10d (both served by ddprun itself) or etcd (etcd's v3 API)",
        shown(c.rdzv_backend)));
  }
  c.rdzv_endpoint = text("rdzv_endpoint");
  c.rdzv_id = text("rdzv_id");
  if (c.rdzv_id.size() > 256 ||
      std::any_of(c.rdzv_id.begin(), c.rdzv_id.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; })) {
    throw UsageError(fmt::format("--rdzv_id={}: expected a job id of at most 256 printable characters",
                                 shown(c.rdzv_id)));
  }
  c.rdzv_conf = text("rdzv_conf");

  c.max_restarts = parse_int("max_restarts", text("max_restarts"), 0, 1 << 30, "a number of restarts, 0 or more");
  const std::string restart_on = text("restart_on");
  if (restart_on != "retryable" && restart_on != "any") {
    throw UsageError(fmt::format("--restart_on={}: expected retryable or any", shown(restart_on)));
  }
  c.restart_on_any = restart_on == "any";
  if (has("restart_window")) c.restart_window = parse_seconds("restart_window", text("restart_window"), false);
  c.restart_backoff_max = parse_seconds("restart_backoff_max", text("restart_backoff_max"), true);
  c.crash_loop_limit =
      parse_int("crash_loop_limit", text("crash_loop_limit"), 0, 1 << 30, "a number of failures, 0 (never) or more");
  c.failure_rules = parse_failure_rules(text("failure_rules"));
  c.monitor_interval = parse_seconds("monitor_interval", text("monitor_interval"), false);
  c.shutdown_timeout = parse_seconds("shutdown_timeout", text("shutdown_timeout"), true);
  c.role = text("role");
  if (c.role.empty()) throw UsageError("--role: expected a non-empty role name");
  c.signals_to_handle = text("signals_to_handle");
  c.stop_signals = parse_signals(c.signals_to_handle);
  c.virtual_local_rank = flag("virtual_local_rank");
  c.numa_binding = text("numa_binding");
  if (!c.numa_binding.empty() && c.numa_binding != "node" && c.numa_binding != "socket" &&
      c.numa_binding != "exclusive" && c.numa_binding != "core-complex") {
    throw UsageError(fmt::format("--numa_binding={}: expected node, socket, exclusive or core-complex",
                                 shown(c.numa_binding)));
  }
  c.hang_timeout = parse_hang_timeout(text("hang_timeout"));
  c.hang_timeout.startup = parse_seconds("hang_startup", text("hang_startup"), false);
  const std::string progress = text("progress");
  if (progress != "on" && progress != "off") {
    throw UsageError(fmt::format("--progress={}: expected on or off", shown(progress)));
  }
  c.progress = progress == "on";
  // Checked here, so that a bad pattern stops the launch before anything starts.
  const std::string patterns = text("progress_pattern");
  for (std::size_t at = 0; !patterns.empty() && at <= patterns.size();) {
    const std::size_t end = std::min(patterns.find('\n', at), patterns.size());
    c.progress_patterns.push_back(ProgressPattern(patterns.substr(at, end - at)).text());
    at = end + 1;
  }

  c.log_dir = text("log_dir");
  c.redirects = parse_streams("redirects", text("redirects"));
  c.tee = parse_streams("tee", text("tee"));
  c.event_log = text("event_log");
  c.result_file = text("result_file");
  c.duplicate_stdout_filters = parse_filters(text("duplicate_stdout_filters"));
  c.duplicate_stderr_filters = parse_filters(text("duplicate_stderr_filters"));
  check_python_plugin("logs_specs", text("logs_specs"), "plug-in of torchrun's, which ddprun cannot load", "default",
                      "ddprun keeps its own log layout: --log_dir, --redirects, --tee");
  check_python_plugin("event_log_handler", text("event_log_handler"), "event handler of torchrun's, which ddprun cannot run", "null",
                      "ddprun writes each event as a JSON line with --event_log FILE");
  c.output_stall_timeout = parse_seconds("output_stall_timeout", text("output_stall_timeout"), false);
  if (has("status_port")) {
    c.status_port = parse_int("status_port", text("status_port"), 0, 65535, "a port in 0..65535 (0: a free one)");
  }
  c.status_addr = host("status_addr");

  c.module = flag("module");
  c.no_python = flag("no_python");
  c.run_path = flag("run_path");
  c.start_method = text("start_method");
  if (c.start_method != "spawn" && c.start_method != "fork" && c.start_method != "forkserver") {
    throw UsageError(fmt::format("--start_method={}: expected spawn, fork or forkserver", shown(c.start_method)));
  }
  if (c.module && c.no_python) {
    throw UsageError("-m/--module and --no_python cannot be used together: a module needs the Python interpreter");
  }

  if (!program_and_args.empty()) {
    c.program = program_and_args.front();
    c.program_args.assign(program_and_args.begin() + 1, program_and_args.end());
  } else if (has("program")) {
    c.program = text("program");
    if (has("args")) {
      // options_from_json_file() checked it: an array of strings.
      c.program_args = nlohmann::json::parse(text("args")).get<std::vector<std::string>>();
    }
  }
  if (c.program.empty()) {
    throw UsageError("missing PROGRAM: usage is ddprun [options] PROGRAM [ARGS...] (see ddprun --help)");
  }

  if (c.standalone) {
    if (c.max_nodes > 1) {
      throw UsageError(fmt::format("--standalone runs one node; drop --nnodes={} or --standalone", nnodes));
    }
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id.clear();
  }
  if (c.debug) {
    if (c.max_nodes > 1) throw UsageError("--debug runs one worker on one node; drop --nnodes");
    if (sources.given("nproc_per_node")) {
      if (c.nproc_spec != "1") {
        throw UsageError(fmt::format("--debug runs one worker; drop --nproc_per_node={}", shown(c.nproc_spec)));
      }
    }
    c.nproc_spec = "1";
    c.max_restarts = 0;
  }
  c.nproc_per_node = resolve_nproc(c.nproc_spec, context);
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
  if (has("local_ranks_filter") && !text("local_ranks_filter").empty()) {
    c.local_ranks_filter = parse_rank_list("local_ranks_filter", text("local_ranks_filter"), c.nproc_per_node);
  }
  return c;
}

}  // namespace

namespace {

// parse_filters() undone: --print_config's output is valid input.
std::string filter_text(const std::vector<std::string>& filters) {
  std::string out;
  for (const auto& filter : filters) {
    if (&filter != &filters.front()) out += ',';
    for (char ch : filter) out += ch == ',' ? std::string(",,") : std::string(1, ch);
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const LaunchConfig& c) {
  const auto nullable = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
  const auto streams = [](const StreamSelection& s) {
    if (s.per_rank.empty()) return std::to_string(s.all);
    std::string out;
    for (const auto& [rank, mask] : s.per_rank) out += fmt::format("{}{}:{}", out.empty() ? "" : ",", rank, mask);
    return out;
  };
  std::string filter;
  if (c.local_ranks_filter) {
    for (int r : *c.local_ranks_filter) filter += fmt::format("{}{}", filter.empty() ? "" : ",", r);
  }
  nlohmann::json j;
  j["nproc_per_node"] = c.nproc_per_node;
  j["nnodes"] = c.min_nodes == c.max_nodes ? std::to_string(c.min_nodes)
                                          : fmt::format("{}:{}", c.min_nodes, c.max_nodes);
  j["node_rank"] = c.node_rank >= 0 ? nlohmann::json(c.node_rank) : nlohmann::json();
  j["master_addr"] = c.master_addr;
  j["master_port"] = c.master_port > 0 ? nlohmann::json(c.master_port) : nlohmann::json();
  j["local_addr"] = nullable(c.local_addr);
  j["standalone"] = c.standalone;
  j["rdzv_backend"] = c.rdzv_backend;
  j["rdzv_endpoint"] = nullable(c.rdzv_endpoint);
  j["rdzv_id"] = nullable(c.rdzv_id);
  j["rdzv_conf"] = nullable(c.rdzv_conf);
  j["max_restarts"] = c.max_restarts;
  j["restart_on"] = c.restart_on_any ? "any" : "retryable";
  j["restart_window"] = c.restart_window > 0 ? nlohmann::json(c.restart_window) : nlohmann::json();
  j["restart_backoff_max"] = c.restart_backoff_max;
  j["crash_loop_limit"] = c.crash_loop_limit;
  j["failure_rules"] = nlohmann::json::parse(failure_rules_json(c.failure_rules));
  j["monitor_interval"] = c.monitor_interval;
  j["shutdown_timeout"] = c.shutdown_timeout;
  j["debug"] = c.debug;
  j["role"] = c.role;
  j["signals_to_handle"] = c.signals_to_handle;
  j["virtual_local_rank"] = c.virtual_local_rank;
  j["numa_binding"] = nullable(c.numa_binding);
  j["hang_startup"] = c.hang_timeout.startup;
  j["progress"] = c.progress ? "on" : "off";
  j["progress_pattern"] = c.progress_patterns;
  switch (c.hang_timeout.mode) {
    case HangTimeout::Mode::kOff: j["hang_timeout"] = "off"; break;
    case HangTimeout::Mode::kAuto:
      j["hang_timeout"] = c.hang_timeout.seconds > 0 ? fmt::format("auto:{}", c.hang_timeout.seconds) : "auto";
      break;
    case HangTimeout::Mode::kFixed: j["hang_timeout"] = c.hang_timeout.seconds; break;
  }
  j["log_dir"] = nullable(c.log_dir);
  j["redirects"] = streams(c.redirects);
  j["tee"] = streams(c.tee);
  j["local_ranks_filter"] = nullable(filter);
  j["event_log"] = nullable(c.event_log);
  j["result_file"] = nullable(c.result_file);
  j["duplicate_stdout_filters"] = nullable(filter_text(c.duplicate_stdout_filters));
  j["duplicate_stderr_filters"] = nullable(filter_text(c.duplicate_stderr_filters));
  j["output_stall_timeout"] = c.output_stall_timeout;
  j["status_port"] = c.status_port >= 0 ? nlohmann::json(c.status_port) : nlohmann::json();
  j["status_addr"] = c.status_addr;
  j["module"] = c.module;
  j["no_python"] = c.no_python;
  j["run_path"] = c.run_path;
  j["start_method"] = c.start_method;
  j["program"] = c.program;
  j["args"] = c.program_args;
  return j;
}

}  // namespace ddprun::config