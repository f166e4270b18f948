#include "ddprun/rendezvous_config.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/parse.hpp"
#include "ddprun/text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ddprun::elastic {

namespace {

// One line naming the flag, what is wrong and what is accepted.
RendezvousConfigError bad_endpoint(std::string_view endpoint, std::string_view problem) {
  return RendezvousConfigError(fmt::format(
      "--rdzv_endpoint={}: {}; expected HOST[:PORT] with PORT in 0..65535, an IPv6 address in brackets "
      "([::1]:29400)",
      shown(endpoint), problem));
}

int parse_port(std::string_view text, std::string_view endpoint) {
  const auto port = config::to_integer(text);
  if (!port || *port < 0 || *port > 65535) throw bad_endpoint(endpoint, fmt::format("bad port '{}'", shown(text, 12)));
  return static_cast<int>(*port);
}

// --rdzv_conf's values, read as every option's are: the name in messages is "--rdzv_conf KEY".
std::string conf_name(std::string_view key) { return fmt::format("--rdzv_conf {}", key); }

double conf_seconds(std::string_view key, std::string_view value, config::Zero zero = config::Zero::kRefused) {
  return config::parse_seconds(conf_name(key), value, zero);
}

int conf_count(std::string_view key, std::string_view value) {
  return config::parse_integer(conf_name(key), value, 0, 1000000, "a whole number, 0 or more");
}

bool conf_bool(std::string_view key, std::string_view value) { return config::parse_bool(conf_name(key), value); }

std::string conf_path(std::string_view key, std::string_view value) {
  if (value.empty()) throw RendezvousConfigError(fmt::format("--rdzv_conf {}=: expected a path", key));
  return std::string(value);
}

}  // namespace

namespace {

// The text of a small file the user names in --rdzv_conf KEY=PATH (a secret, a password), its
// trailing newlines dropped. A regular file of at most 64 KiB: /dev/zero, a FIFO nobody writes
// or a huge file would otherwise hang ddprun or fill its memory.
std::string read_secret_file(const char* key, const std::string& path, const char* what) {
  constexpr std::size_t kMaxBytes = 64 * 1024;
  const auto fail = [&](const std::string& problem) {
    return RendezvousConfigError(fmt::format("--rdzv_conf {}={}: {}", key, shown(path), problem));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw fail(fmt::format("cannot read it: {}", std::strerror(errno)));
  const std::string wrong_kind = fmt::format("expected a regular file of at most {} bytes", kMaxBytes);
  if (!S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) > kMaxBytes) throw fail(wrong_kind);
  std::ifstream file(path, std::ios::binary);
  std::string text(kMaxBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (file.bad() || (!file && !file.eof())) throw fail(fmt::format("cannot read it: {}", std::strerror(errno)));
  text.resize(static_cast<std::size_t>(file.gcount()));
  if (text.size() > kMaxBytes) throw fail(wrong_kind);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) throw fail(fmt::format("the file is empty; put {} in it", what));
  return text;
}

}  // namespace

void load_secret(RendezvousConfig& config, const char* env_secret) {
  if (!config.etcd.password_file.empty()) {
    if (!config.etcd.password.empty()) {
      throw RendezvousConfigError("--rdzv_conf password= and password_file= are two sources of one password; give one");
    }
    config.etcd.password = read_secret_file("password_file", config.etcd.password_file, "etcd's password");
  }
  if (config.secret_file.empty()) {
    config.secret = env_secret ? env_secret : "";
    if (env_secret && config.secret.empty()) {
      throw RendezvousConfigError("DDPRUN_RDZV_SECRET is set but empty; give the job's secret or unset it");
    }
    return;
  }
  config.secret = read_secret_file("secret_file", config.secret_file, "the job's secret");
}

int connection_limit(const RendezvousConfig& config, long fd_limit) {
  if (config.max_connections > 0) return config.max_connections;
  const long by_nodes = 2L * config.max_nodes + 16;
  return static_cast<int>(std::max(4L, std::min(by_nodes, fd_limit / 4)));
}

Endpoint parse_endpoint(std::string_view text, int default_port) {
  Endpoint e;
  e.port = default_port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      throw bad_endpoint(text, "no ']' after the IPv6 address");
    }
    e.host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw bad_endpoint(text, "no ':' after the ']'");
      e.port = parse_port(rest.substr(1), text);
    }
  } else if (const auto colon = text.rfind(':');
             colon != std::string_view::npos && text.find(':') == colon) {  // one colon: host:port
    e.host = text.substr(0, colon);
    e.port = parse_port(text.substr(colon + 1), text);
  } else {
    e.host = text;  // a name, an IPv4 address or a bare IPv6 address
  }
  if (e.host.empty()) {
    throw bad_endpoint(text, "no host");
  }
  if (e.host.size() > kMaxHostChars) {
    throw bad_endpoint(text, fmt::format("a host of more than {} characters", kMaxHostChars));
  }
  return e;
}

namespace {
int static_master_port(const RendezvousConfig& config) {
  return config.master_port > 0 ? config.master_port : kDefaultMasterPort;
}
}  // namespace

std::vector<Endpoint> etcd_endpoints(const RendezvousConfig& config) {
  std::vector<Endpoint> members;
  std::string_view list = config.endpoint;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view item = trim(list.substr(0, comma), " \t");
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (!item.empty()) members.push_back(parse_endpoint(item, kDefaultEtcdPort));
  }
  if (members.empty()) {
    throw RendezvousConfigError(
        "the etcd rendezvous backend needs --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...], the etcd members' client "
        "addresses");
  }
  return members;
}

Endpoint rendezvous_endpoint(const RendezvousConfig& config) {
  if (config.backend == Backend::kEtcd) return etcd_endpoints(config).front();
  if (!config.endpoint.empty()) {
    return parse_endpoint(config.endpoint, config.backend == Backend::kStatic ? static_master_port(config)
                                                                             : kDefaultEndpointPort);
  }
  if (config.backend == Backend::kStatic) return Endpoint{config.master_addr, static_master_port(config)};
  throw RendezvousConfigError("the c10d rendezvous backend needs --rdzv_endpoint=HOST[:PORT]");
}

Endpoint single_node_master(const RendezvousConfig& config) {
  if (config.backend == Backend::kStatic && !config.endpoint.empty()) {
    return parse_endpoint(config.endpoint, config.master_port);
  }
  return Endpoint{config.master_addr, config.master_port};
}

namespace {

// --rdzv_conf's keys, in the order the message for an unknown key lists them.
struct ConfKey {
  const char* name;
  const char* alias;  // torchrun's other name for it, or nullptr
  void (*apply)(std::string_view key, std::string_view value, RendezvousConfig& config);
};
using K = std::string_view;
using C = RendezvousConfig&;
const ConfKey kConfKeys[] = {
    {"join_timeout", "timeout", [](K k, K v, C c) { c.timeouts.join_timeout = conf_seconds(k, v); }},
    {"last_call_timeout", nullptr, [](K k, K v, C c) { c.timeouts.last_call_timeout = conf_seconds(k, v); }},
    {"close_timeout", nullptr, [](K k, K v, C c) { c.timeouts.close_timeout = conf_seconds(k, v); }},
    {"heartbeat_interval", nullptr, [](K k, K v, C c) { c.timeouts.heartbeat_interval = conf_seconds(k, v); }},
    {"heartbeat_timeout", nullptr, [](K k, K v, C c) { c.timeouts.heartbeat_timeout = conf_seconds(k, v); }},
    {"auth_timeout", nullptr, [](K k, K v, C c) { c.timeouts.auth_timeout = conf_seconds(k, v); }},
    {"is_host", nullptr, [](K k, K v, C c) { c.is_host = conf_bool(k, v); }},
    {"secret_file", nullptr, [](K k, K v, C c) { c.secret_file = conf_path(k, v); }},
    {"auth", nullptr,
     [](K k, K v, C c) {
       constexpr AuthMode kModes[] = {AuthMode::kAuto, AuthMode::kSecret, AuthMode::kMunge, AuthMode::kNone};
       c.auth = kModes[config::parse_choice(conf_name(k), v, {"auto", "secret", "munge", "none"})];
     }},
    {"munge_socket", nullptr, [](K k, K v, C c) { c.munge_socket = conf_path(k, v); }},
    {"max_connections", nullptr, [](K k, K v, C c) { c.max_connections = conf_count(k, v); }},
    {"max_membership_changes", nullptr, [](K k, K v, C c) { c.max_membership_changes = conf_count(k, v); }},
    {"spares", nullptr, [](K k, K v, C c) { c.spares = conf_count(k, v); }},
    {"quarantine_after", nullptr, [](K k, K v, C c) { c.quarantine_after = conf_count(k, v); }},
    {"quarantine_window", nullptr,
     [](K k, K v, C c) { c.quarantine_window = conf_seconds(k, v, config::Zero::kAllowed); }},
    {"protocol", nullptr,
     [](K k, K v, C c) {
       config::parse_choice(conf_name(k), v, {"http", "https"});
       c.etcd.protocol = v;
     }},
    {"cacert", nullptr, [](K k, K v, C c) { c.etcd.cacert = conf_path(k, v); }},
    {"cert", nullptr, [](K k, K v, C c) { c.etcd.cert = conf_path(k, v); }},
    {"key", nullptr, [](K k, K v, C c) { c.etcd.key = conf_path(k, v); }},
    {"user", nullptr, [](K, K v, C c) { c.etcd.user = v; }},
    {"password", nullptr, [](K, K v, C c) { c.etcd.password = v; }},
    {"password_file", nullptr, [](K k, K v, C c) { c.etcd.password_file = conf_path(k, v); }},
};

}  // namespace

std::vector<std::string> apply_rdzv_conf(std::string_view conf, RendezvousConfig& config) {
  std::vector<std::string> ignored;
  while (!conf.empty()) {
    const auto comma = conf.find(',');
    const std::string_view item = trim(conf.substr(0, comma), " \t");
    conf = comma == std::string_view::npos ? std::string_view() : conf.substr(comma + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw RendezvousConfigError(fmt::format("--rdzv_conf '{}': expected KEY=VALUE", shown(item)));
    }
    const std::string_view key = trim(item.substr(0, eq), " \t");
    const std::string_view value = trim(item.substr(eq + 1), " \t");
    if (key == "read_timeout" || key == "store_type" || key == "keep_alive_interval" ||
        key == "keep_alive_max_attempt" || key == "rank") {
      ignored.emplace_back(key);
      continue;
    }
    const auto* setting = std::find_if(std::begin(kConfKeys), std::end(kConfKeys), [&](const ConfKey& k) {
      return key == k.name || (k.alias != nullptr && key == k.alias);
    });
    if (setting == std::end(kConfKeys)) {
      std::string known;
      for (const ConfKey& k : kConfKeys) known += fmt::format("{}{}", known.empty() ? "" : ", ", k.name);
      throw RendezvousConfigError(fmt::format("--rdzv_conf: unknown key '{}'; known keys: {}", shown(key), known));
    }
    setting->apply(key, value, config);
  }
  return ignored;
}

void validate(const RendezvousConfig& c) {
  if (c.min_nodes < 1 || c.min_nodes > c.max_nodes) {
    throw RendezvousConfigError(
        fmt::format("--nnodes={}:{} needs 0 < MIN <= MAX", c.min_nodes, c.max_nodes));
  }
  if (c.backend == Backend::kStatic && c.min_nodes != c.max_nodes) {
    throw RendezvousConfigError(fmt::format(
        "--nnodes={}:{} needs --rdzv_backend=c10d; the static backend takes a fixed --nnodes=N", c.min_nodes,
        c.max_nodes));
  }
  if (c.node_rank < -1 || c.node_rank >= c.max_nodes) {
    throw RendezvousConfigError(
        fmt::format("--node_rank={} is out of range for {} nodes (0 to {})", c.node_rank, c.max_nodes, c.max_nodes - 1));
  }
  if (c.nproc < 1) throw RendezvousConfigError(fmt::format("--nproc_per_node={} must be at least 1", c.nproc));
  if (c.spares > 0 && c.max_nodes == 1) {
    throw RendezvousConfigError(fmt::format(
        "--rdzv_conf spares={} needs --nnodes of 2 or more: a job of one node has no rendezvous to keep spares in",
        c.spares));
  }
  if (c.spares > 0 && c.backend == Backend::kStatic) {
    throw RendezvousConfigError(fmt::format(
        "--rdzv_conf spares={} needs --rdzv_backend=c10d or etcd: the static backend gives every node a --node_rank "
        "below --nnodes, and a spare has none",
        c.spares));
  }
  if (c.max_restarts < 0) {
    throw RendezvousConfigError(fmt::format("--max_restarts={} must not be negative", c.max_restarts));
  }
  const RendezvousTimeouts& t = c.timeouts;
  for (const auto& [name, value] : {std::pair{"join_timeout", t.join_timeout},
                                   {"last_call_timeout", t.last_call_timeout},
                                   {"close_timeout", t.close_timeout},
                                   {"heartbeat_interval", t.heartbeat_interval},
                                   {"heartbeat_timeout", t.heartbeat_timeout},
                                   {"auth_timeout", t.auth_timeout}}) {
    if (!(value > 0)) throw RendezvousConfigError(fmt::format("--rdzv_conf {}={} must be positive", name, value));
  }
  if (t.heartbeat_timeout <= t.heartbeat_interval) {
    throw RendezvousConfigError(fmt::format(
        "--rdzv_conf heartbeat_timeout={} must be longer than heartbeat_interval={}", t.heartbeat_timeout,
        t.heartbeat_interval));
  }
  // A node fences itself (core/fence.hpp) 0.8 x heartbeat_timeout after the last heartbeat the
  // host acknowledged; an interval over half the timeout would leave too little room for the
  // acknowledgements of a healthy network.
  if (t.heartbeat_interval > t.heartbeat_timeout / 2) {
    throw RendezvousConfigError(fmt::format(
        "--rdzv_conf heartbeat_interval={} must be at most half of heartbeat_timeout={}", t.heartbeat_interval,
        t.heartbeat_timeout));
  }
  if (c.backend == Backend::kEtcd) {
    if (c.max_nodes == 1) return;  // one node: in-process, etcd is not asked
    if (!DDPRUN_ETCD) {
      throw RendezvousConfigError(
          "--rdzv_backend=etcd: this ddprun was built without the etcd rendezvous (DDPRUN_ETCD=OFF); use "
          "--rdzv_backend=c10d or static, or a ddprun built with -DDDPRUN_ETCD=ON");
    }
    for (const Endpoint& e : etcd_endpoints(c)) {
      if (e.port == 0) throw bad_endpoint(c.endpoint, "port 0 is no etcd member's port");
    }
    if (c.run_id.empty()) {
      throw RendezvousConfigError("the etcd rendezvous needs --rdzv_id: it names the job's keys in etcd");
    }
    if ((c.etcd.cert.empty()) != (c.etcd.key.empty())) {
      throw RendezvousConfigError("--rdzv_conf cert= and key= go together: the client certificate and its key");
    }
    if (c.etcd.user.empty() != c.etcd.password.empty()) {
      throw RendezvousConfigError("--rdzv_conf user= and password= go together");
    }
    return;
  }
  if (!c.endpoint.empty()) parse_endpoint(c.endpoint, 0);  // throws for a bad one, on one node too
  if (c.max_nodes == 1) return;  // a single node meets nobody: no endpoint, id or rank needed
  const Endpoint endpoint = rendezvous_endpoint(c);
  if (endpoint.port == 0) {
    throw RendezvousConfigError(fmt::format(
        "rendezvous endpoint {}:0: a multi-node job needs a fixed port that every node knows", endpoint.host));
  }
  if (c.backend == Backend::kC10d && c.run_id.empty()) {
    throw RendezvousConfigError(
        "a multi-node c10d rendezvous needs --rdzv_id, so that jobs sharing an endpoint stay apart");
  }
  if (c.backend == Backend::kStatic && c.node_rank < 0) {
    throw RendezvousConfigError(fmt::format(
        "the static rendezvous backend needs --node_rank (0 to {}) on every node", c.max_nodes - 1));
  }
}

Hosting hosts_rendezvous(const RendezvousConfig& config, const std::vector<std::string>& endpoint_addrs,
                         const std::vector<std::string>& own_addrs) {
  if (config.is_host) return *config.is_host ? Hosting::kYes : Hosting::kNo;
  if (config.backend == Backend::kStatic) return config.node_rank == 0 ? Hosting::kYes : Hosting::kNo;
  const bool local = std::any_of(endpoint_addrs.begin(), endpoint_addrs.end(), [&](const std::string& addr) {
    return std::find(own_addrs.begin(), own_addrs.end(), addr) != own_addrs.end();
  });
  return local ? Hosting::kIfPortFree : Hosting::kNo;
}

}  // namespace ddprun::elastic
