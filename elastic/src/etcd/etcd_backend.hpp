// The etcd backend's row (--rdzv_backend=etcd): its --rdzv_conf keys, its settings read from
// them, its checks and its authentication stance. Built whether or not this build has the etcd
// rendezvous (DDPRUN_ETCD), so that its keys are read and refused alike in every build; only the
// rendezvous, which src/backends.cpp passes to etcd_backend(), needs libcurl.
#pragma once

#include <string>
#include <vector>

#include "core/backend_entry.hpp"

namespace ddprun::elastic {

inline constexpr int kDefaultEtcdPort = 2379;  // etcd's client port

// How to reach etcd, from --rdzv_conf.
struct EtcdSettings {
  std::string protocol = "http";  // protocol=http|https
  std::string cacert;             // cacert=PATH: CA bundle that signed the members' certificates
  std::string cert;               // cert=PATH, key=PATH: this node's client certificate (mutual TLS)
  std::string key;
  std::string user;      // user=NAME, password=TEXT (or password_file=PATH, not in `ps`):
  std::string password;  // etcd's own authentication
};

// The settings `config`'s --rdzv_conf gave (after load_secret, the password_file's password).
EtcdSettings etcd_settings(const RendezvousConfig& config);

// --rdzv_endpoint of the etcd backend: "HOST[:PORT][,HOST[:PORT]...]", one per etcd member
// (2379 when no port). Throws RendezvousConfigError on an empty list or a bad member.
std::vector<Endpoint> etcd_endpoints(const RendezvousConfig& config);

// The row, making its rendezvous with `make`: null in a build without it (DDPRUN_ETCD=OFF),
// which then refuses a job of several nodes in one line.
BackendEntry etcd_backend(decltype(BackendEntry::make) make);

}  // namespace ddprun::elastic
