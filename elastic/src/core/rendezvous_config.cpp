#include "ddprun/rendezvous_config.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include "core/backend_entry.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/parse.hpp"
#include "ddprun/text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ddprun::elastic {

RendezvousConfigError bad_endpoint(std::string_view endpoint, std::string_view problem) {
  return RendezvousConfigError(fmt::format(
      "--rdzv_endpoint={}: {}; expected HOST[:PORT] with PORT in 0..65535, an IPv6 address in brackets "
      "([::1]:29400)",
      shown(endpoint), problem));
}

namespace {

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

}  // namespace

std::string conf_path(std::string_view key, std::string_view value) {
  if (value.empty()) throw RendezvousConfigError(fmt::format("--rdzv_conf {}=: expected a path", key));
  return std::string(value);
}

void conf_choice(std::string_view key, std::string_view value, std::initializer_list<std::string_view> choices) {
  config::parse_choice(conf_name(key), value, choices);
}

// A regular file of at most 64 KiB: /dev/zero, a FIFO nobody writes or a huge file would
// otherwise hang ddprun or fill its memory.
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

void load_secret(RendezvousConfig& config, const char* env_secret, const std::vector<BackendEntry>& backends) {
  for (const BackendEntry& backend : backends) {
    if (backend.load_files) backend.load_files(config);
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

OneNodeMaster one_node_master(const RendezvousConfig& config, const BackendEntry& backend) {
  if (backend.one_node_master) return backend.one_node_master(config);
  return {Endpoint{config.master_addr, config.master_port}, false};
}

namespace {

// The job's --rdzv_conf keys, whatever its backend, in the order the message for an unknown key
// lists them (the backends' rows follow).
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
};

}  // namespace

namespace {

// torchrun's keys that ddprun accepts and does not use, and why (torchrun 2.11's c10d, etcd,
// etcd-v2 and static backends read them).
struct UnusedKey {
  std::string_view name;
  std::string_view why;
};
constexpr std::string_view kOwnStore = "configures torchrun's own store or its keep-alive, which ddprun does not use";
const UnusedKey kUnusedKeys[] = {
    {"read_timeout", kOwnStore},
    {"store_type", kOwnStore},
    {"use_libuv", kOwnStore},
    {"keep_alive_interval", kOwnStore},
    {"keep_alive_max_attempt", kOwnStore},
    {"rank", "is torchrun's static backend's node rank; ddprun reads --node_rank"},
    {"etcd_prefix", "is where torchrun's etcd backend keeps its keys; ddprun keeps a job under /ddprun/<run id>/"},
    {"ssl_cert", "is torchrun's etcd-v2 name; ddprun reads cert= (etcd-v2 itself is refused)"},
    {"ssl_cert_key", "is torchrun's etcd-v2 name; ddprun reads key= (etcd-v2 itself is refused)"},
    {"ca_cert", "is torchrun's etcd-v2 name; ddprun reads cacert= (etcd-v2 itself is refused)"},
};

bool quoted(std::string_view text) {
  return !text.empty() && (text.front() == '\'' || text.front() == '"' || text.back() == '\'' || text.back() == '"');
}

constexpr std::string_view kQuoteNote =
    " (a quote is part of it, as torchrun reads it: no shell removed it)";

}  // namespace

std::vector<std::string> apply_rdzv_conf(std::string_view conf, RendezvousConfig& config,
                                         const std::vector<BackendEntry>& backends) {
  // The job's keys, then every backend row's, once for the whole --rdzv_conf.
  std::vector<const ConfKey*> keys;
  for (const ConfKey& k : kConfKeys) keys.push_back(&k);
  for (const BackendEntry& backend : backends) {
    for (const ConfKey& k : backend.keys) keys.push_back(&k);
  }
  const auto known = [&] {
    std::string text;
    for (const ConfKey* k : keys) text += fmt::format("{}{}", text.empty() ? "" : ", ", k->name);
    return text;
  };
  // As torchrun's parser (rendezvous/utils.py): split at every comma, each item at its first '=',
  // key and value trimmed of white space and nothing else: a quote no shell removed stays part of
  // the key or value it touches. An empty item is skipped (torchrun refuses it).
  std::vector<std::string> notes;
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
    const auto unused = std::find_if(std::begin(kUnusedKeys), std::end(kUnusedKeys),
                                     [&](const UnusedKey& u) { return key == u.name; });
    if (unused != std::end(kUnusedKeys)) {
      notes.push_back(fmt::format("--rdzv_conf {} {}; accepted, not used", key, unused->why));
      continue;
    }
    const auto setting = std::find_if(keys.begin(), keys.end(), [&](const ConfKey* k) {
      return key == k->name || (k->alias != nullptr && key == k->alias);
    });
    if (setting == keys.end()) {
      // torchrun's backends read the keys they know and skip the rest: so does ddprun, aloud.
      notes.push_back(fmt::format("--rdzv_conf '{}' is not a key ddprun reads{}; accepted, not used (ddprun's keys: {})",
                                  shown(key), quoted(key) ? kQuoteNote : "", known()));
      continue;
    }
    try {
      (*setting)->apply(key, value, config);
    } catch (const RendezvousConfigError& e) {
      // torchrun's c10d backend never reads `timeout` (its join timeout is join_timeout): a value
      // it would not have parsed is not a refusal here either.
      if (key == "timeout" && config.backend == Backend::kC10d) {
        notes.push_back(fmt::format("--rdzv_conf timeout={} is not a number of seconds{}; the c10d backend does not "
                                    "read it in torchrun, so ddprun does not either (join_timeout stays {} s)",
                                    shown(value), quoted(value) ? kQuoteNote : "", config.timeouts.join_timeout));
        continue;
      }
      if (!quoted(value)) throw;
      throw RendezvousConfigError(std::string(e.what()) +
                                  "; its quote is part of the value, as torchrun reads it (no shell removed it)");
    }
  }
  return notes;
}

void validate(const RendezvousConfig& c, const BackendEntry& backend) {
  if (c.min_nodes < 1 || c.min_nodes > c.max_nodes) {
    throw RendezvousConfigError(
        fmt::format("--nnodes={}:{} needs 0 < MIN <= MAX", c.min_nodes, c.max_nodes));
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
  if (backend.check_job) backend.check_job(c);
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
  if (c.max_nodes > 1 && !backend.make) throw RendezvousConfigError(std::string(backend.unbuilt));
  backend.check(c);
}

}  // namespace ddprun::elastic
