#include "ddprun/launch_config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/input_limits.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun::config {
namespace {

constexpr OptionKind kText = OptionKind::kText;
constexpr OptionKind kFlag = OptionKind::kFlag;

const std::vector<OptionSpec> kOptions = {
    {"nproc_per_node", nullptr, kText, "1", "Workers",
     "workers on this node: a number, 'gpu' (one per visible GPU), 'cpu' (one per core) or "
     "'auto' (GPUs if any, else cores)"},
    {"nnodes", nullptr, kText, "1", "Nodes", "number of nodes, or MIN:MAX for an elastic job"},
    {"node_rank", nullptr, kText, nullptr, "Nodes",
     "this node's rank, 0..nnodes-1 (default: assigned by the rendezvous)"},
    {"master_addr", nullptr, kText, "127.0.0.1", "Nodes",
     "address of the node hosting rank 0 (static rendezvous)"},
    {"master_port", nullptr, kText, nullptr, "Nodes",
     "port on master_addr (default: a free port)"},
    {"local_addr", nullptr, kText, nullptr, "Nodes",
     "address other nodes reach this node at (default: its host name)"},
    {"standalone", nullptr, kFlag, nullptr, "Nodes",
     "single-node job with a private rendezvous on a free port"},
    {"rdzv_backend", nullptr, kText, "static", "Rendezvous", "static or c10d (both served by ddprun), or etcd"},
    {"rdzv_endpoint", nullptr, kText, nullptr, "Rendezvous",
     "host[:port] of the rendezvous (c10d's default port 29400); with static it replaces "
     "--master_addr:--master_port, and on one node it is the workers' MASTER_ADDR:MASTER_PORT"},
    {"rdzv_id", nullptr, kText, nullptr, "Rendezvous",
     "job id shared by all nodes of one job (default: generated on a single node)"},
    {"rdzv_conf", nullptr, kText, nullptr, "Rendezvous",
     "k=v,... : join_timeout, last_call_timeout, close_timeout, heartbeat_timeout, ..."},
    {"max_restarts", nullptr, kText, "0", "Supervision",
     "restarts of the whole job after a worker failure"},
    {"monitor_interval", nullptr, kText, "0.1", "Supervision",
     "accepted for torchrun compatibility; ddprun reacts to exits at once"},
    {"shutdown_timeout", nullptr, kText, "30", "Supervision",
     "seconds between SIGTERM and SIGKILL when stopping workers"},
    {"debug", nullptr, kFlag, nullptr, "Supervision",
     "one worker in the foreground with the terminal, world size 1, no restarts "
     "(ddprun --debug gdb --args ./train)"},
    {"role", nullptr, kText, "default", "Supervision", "worker role name (ROLE_NAME)"},
    {"hang_timeout", nullptr, kText, "off", "Supervision",
     "a worker whose heartbeat (DDPRUN_HEARTBEAT_FILE) is older than this many seconds is hung: "
     "its stacks are saved and the job restarts; 'auto' learns it from the beats (auto:MIN_SECONDS "
     "sets its least value, default 30); 'off'"},
    {"hang_startup", nullptr, kText, "600", "Supervision",
     "with --hang_timeout: seconds a worker may take to its first heartbeat"},
    {"log_dir", nullptr, kText, nullptr, "Output",
     "also keep attempt_N/rank_R/{stdout,stderr}.log here"},
    {"redirects", "-r", kText, "0", "Output",
     "send worker output to log files only: 1 stdout, 2 stderr, 3 both; or per local rank 0:1,1:2"},
    {"tee", "-t", kText, "0", "Output", "send worker output to log files and console; same format"},
    {"local_ranks_filter", nullptr, kText, nullptr, "Output",
     "show only these local ranks on the console, e.g. 0,1 (log files keep all)"},
    {"event_log", nullptr, kText, nullptr, "Output", "append one JSON object a line for each event of the job to this file"},
    {"status_port", nullptr, kText, nullptr, "Output",
     "serve GET /healthz and GET /status on this port (0: a free one, printed)"},
    {"status_addr", nullptr, kText, "127.0.0.1", "Output", "address the status server listens on"},
    {"module", "-m", kFlag, nullptr, "Program", "run PROGRAM as a Python module (python -m)"},
    {"no_python", nullptr, kFlag, nullptr, "Program",
     "execute PROGRAM directly even if it ends in .py"},
    {"run_path", nullptr, kFlag, nullptr, "Program", "accepted for torchrun compatibility: runs the script under Python"},
    {"start_method", nullptr, kText, "spawn", "Program",
     "accepted for torchrun compatibility: spawn, fork or forkserver (workers are always separate programs)"},
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

std::optional<std::string> read_command_output(const char* command) {
  FILE* pipe = ::popen(command, "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  if (::pclose(pipe) != 0) return std::nullopt;
  return output;
}

}  // namespace

const std::vector<OptionSpec>& option_specs() { return kOptions; }

int StreamSelection::mask_for(int local_rank) const {
  const auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? all : it->second;
}

bool StreamSelection::any() const {
  return all != 0 ||
         std::any_of(per_rank.begin(), per_rank.end(), [](const auto& kv) { return kv.second != 0; });
}

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

bool LaunchConfig::runs_python() const {
  if (no_python) return false;
  if (module || run_path) return true;
  return program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0;
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

int count_gpus(const std::map<std::string, std::string>& environ) {
  int physical = 0;
  if (auto listing = read_command_output("nvidia-smi -L 2>/dev/null")) {
    std::stringstream lines(*listing);
    std::string line;
    while (std::getline(lines, line)) physical += line.rfind("GPU ", 0) == 0;
  } else if (FILE* probe = ::popen("ls /proc/driver/nvidia/gpus 2>/dev/null", "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof buffer, probe) != nullptr) ++physical;
    ::pclose(probe);
  }
  const auto visible = environ.find(env::kCudaVisibleDevices);
  return visible_gpu_count(physical, visible == environ.end() ? std::nullopt
                                                             : std::optional<std::string>(visible->second));
}

int visible_gpu_count(int physical, const std::optional<std::string>& visible) {
  if (!visible) return physical;
  int count = 0;
  std::stringstream items(*visible);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty() || item[0] == '-') break;
    ++count;
  }
  return std::min(count, physical);
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
  for (const auto& spec : kOptions) {
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
  if (c.rdzv_backend != "static" && c.rdzv_backend != "c10d" && c.rdzv_backend != "etcd") {
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
  c.monitor_interval = parse_seconds("monitor_interval", text("monitor_interval"), false);
  c.shutdown_timeout = parse_seconds("shutdown_timeout", text("shutdown_timeout"), true);
  c.role = text("role");
  if (c.role.empty()) throw UsageError("--role: expected a non-empty role name");
  c.hang_timeout = parse_hang_timeout(text("hang_timeout"));
  c.hang_timeout.startup = parse_seconds("hang_startup", text("hang_startup"), false);

  c.log_dir = text("log_dir");
  c.redirects = parse_streams("redirects", text("redirects"));
  c.tee = parse_streams("tee", text("tee"));
  c.event_log = text("event_log");
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
  if (has("local_ranks_filter") && !text("local_ranks_filter").empty()) {
    c.local_ranks_filter = parse_rank_list("local_ranks_filter", text("local_ranks_filter"), c.nproc_per_node);
  }
  return c;
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
  j["monitor_interval"] = c.monitor_interval;
  j["shutdown_timeout"] = c.shutdown_timeout;
  j["debug"] = c.debug;
  j["role"] = c.role;
  j["hang_startup"] = c.hang_timeout.startup;
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
