#include "etcd/etcd_backend.hpp"

#include <fmt/format.h>

#include "ddprun/text.hpp"

namespace ddprun::elastic {

namespace {

std::string conf(const RendezvousConfig& config, const char* key) {
  const auto it = config.backend_conf.find(key);
  return it == config.backend_conf.end() ? std::string() : it->second;
}

using K = std::string_view;
using C = RendezvousConfig&;
const std::vector<ConfKey> kKeys = {
    {"protocol", nullptr,
     [](K k, K v, C c) {
       conf_choice(k, v, {"http", "https"});
       c.backend_conf["protocol"] = v;
     }},
    {"cacert", nullptr, [](K k, K v, C c) { c.backend_conf["cacert"] = conf_path(k, v); }},
    {"cert", nullptr, [](K k, K v, C c) { c.backend_conf["cert"] = conf_path(k, v); }},
    {"key", nullptr, [](K k, K v, C c) { c.backend_conf["key"] = conf_path(k, v); }},
    {"user", nullptr, [](K, K v, C c) { c.backend_conf["user"] = v; }},
    {"password", nullptr, [](K, K v, C c) { c.backend_conf["password"] = v; }},
    {"password_file", nullptr, [](K k, K v, C c) { c.backend_conf["password_file"] = conf_path(k, v); }},
};

void load_password(RendezvousConfig& config) {
  const std::string file = conf(config, "password_file");
  if (file.empty()) return;
  if (!conf(config, "password").empty()) {
    throw RendezvousConfigError("--rdzv_conf password= and password_file= are two sources of one password; give one");
  }
  config.backend_conf["password"] = read_secret_file("password_file", file, "etcd's password");
}

void check(const RendezvousConfig& c) {
  if (c.max_nodes == 1) return;  // one node: in-process, etcd is not asked
  for (const Endpoint& e : etcd_endpoints(c)) {
    if (e.port == 0) throw bad_endpoint(c.endpoint, "port 0 is no etcd member's port");
  }
  if (c.run_id.empty()) {
    throw RendezvousConfigError("the etcd rendezvous needs --rdzv_id: it names the job's keys in etcd");
  }
  const EtcdSettings s = etcd_settings(c);
  if (s.cert.empty() != s.key.empty()) {
    throw RendezvousConfigError("--rdzv_conf cert= and key= go together: the client certificate and its key");
  }
  if (s.user.empty() != s.password.empty()) {
    throw RendezvousConfigError("--rdzv_conf user= and password= go together");
  }
}

Endpoint first_member(const RendezvousConfig& config) { return etcd_endpoints(config).front(); }

}  // namespace

EtcdSettings etcd_settings(const RendezvousConfig& config) {
  EtcdSettings s;
  if (const std::string protocol = conf(config, "protocol"); !protocol.empty()) s.protocol = protocol;
  s.cacert = conf(config, "cacert");
  s.cert = conf(config, "cert");
  s.key = conf(config, "key");
  s.user = conf(config, "user");
  s.password = conf(config, "password");
  return s;
}

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

BackendEntry etcd_backend(decltype(BackendEntry::make) make) {
  BackendEntry e;
  e.id = Backend::kEtcd;
  e.keys = kKeys;
  e.load_files = load_password;
  e.check = check;
  e.endpoint = first_member;
  e.auth.auth_refused =
      "--rdzv_conf auth= applies to the static and c10d backends; the etcd backend is guarded by etcd's TLS and "
      "users (--rdzv_conf protocol=https,cacert=...,cert=...,key=..., user=..., password=...)";
  e.auth.secret_unused =
      "ddprun: the rendezvous secret does not guard the etcd backend, which etcd's TLS and users guard; it "
      "authenticates only the copies of the snapshot folder between the nodes";
  e.make = make;
  e.unbuilt =
      "--rdzv_backend=etcd: this ddprun was built without the etcd rendezvous (DDPRUN_ETCD=OFF); use "
      "--rdzv_backend=c10d or static, or a ddprun built with -DDDPRUN_ETCD=ON";
  return e;
}

}  // namespace ddprun::elastic
