// What a rendezvous backend is to the rest of elastic/: one row (BackendEntry) that its folder
// exports and src/backends.cpp lists. The rules written once here (the --rdzv_conf keys of the
// job, validation, the secret's file) consult the chosen row for the rest; none of them names a
// backend.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous.hpp"
#include "ddprun/rendezvous_config.hpp"

namespace asio {
class io_context;
}

namespace ddprun::elastic {

// One --rdzv_conf key: its name, torchrun's other name for it (or nullptr), and how its value is
// read into the configuration. Throws RendezvousConfigError on a bad value.
struct ConfKey {
  const char* name;
  const char* alias;
  void (*apply)(std::string_view key, std::string_view value, RendezvousConfig& config);
};

// Who guards a backend's rendezvous.
struct AuthStance {
  // Empty: ddprun's own authentication (a secret, MUNGE, or open with a warning; choose_auth in
  // src/auth/auth_policy.hpp). Otherwise the service the backend keeps the job in guards it with
  // its own TLS and users, and this refuses --rdzv_conf auth=.
  std::string_view auth_refused;
  // With such a service: the line that says that a secret given has no effect.
  std::string_view secret_unused;
  bool ddprun_guards() const { return auth_refused.empty(); }
};

// MASTER_ADDR and MASTER_PORT of a one-node job (port 0: a free port), and whether that port is
// --rdzv_endpoint's own (for the message when it is taken).
struct OneNodeMaster {
  Endpoint at;
  bool port_from_endpoint = false;
};

struct BackendEntry {
  Backend id{};  // the --rdzv_backend it answers (config/'s names: ddprun/rdzv_backend.hpp)
  // The --rdzv_conf keys it reads beyond the job's own, stored in backend_conf. Every row's are
  // accepted whichever backend is chosen, as for a command line written for another.
  std::vector<ConfKey> keys;
  // Reads the files its keys name into backend_conf (load_secret, a job of several nodes, every
  // row's); null: none.
  void (*load_files)(RendezvousConfig& config) = nullptr;
  // The job it takes (--nnodes, spares), checked before the restart budget and the timeouts;
  // null: any.
  void (*check_job)(const RendezvousConfig& config) = nullptr;
  // The rest of its checks (endpoint, id, its keys), after the job's; a job of one node too.
  void (*check)(const RendezvousConfig& config) = nullptr;
  // Where the nodes of a job of several meet.
  Endpoint (*endpoint)(const RendezvousConfig& config) = nullptr;
  // A job of one node's MASTER_ADDR and MASTER_PORT; null: --master_addr and --master_port.
  OneNodeMaster (*one_node_master)(const RendezvousConfig& config) = nullptr;
  AuthStance auth;
  // Its rendezvous, for a job of several nodes; null where this build has none, which
  // `unbuilt` then says in one line.
  std::unique_ptr<Rendezvous> (*make)(asio::io_context& io, const RendezvousConfig& config) = nullptr;
  std::string_view unbuilt;
};

// What apply_rdzv_conf, load_secret and validate (ddprun/rendezvous_config.hpp) do, over the
// rows `backends` (every one) and `backend` (the chosen one); src/backends.cpp passes them.
std::vector<std::string> apply_rdzv_conf(std::string_view conf, RendezvousConfig& config,
                                         const std::vector<BackendEntry>& backends);
void load_secret(RendezvousConfig& config, const char* env_secret, const std::vector<BackendEntry>& backends);
void validate(const RendezvousConfig& config, const BackendEntry& backend);
OneNodeMaster one_node_master(const RendezvousConfig& config, const BackendEntry& backend);

// For a row's keys, read as every option's are ("--rdzv_conf KEY" in messages): a path (not
// empty), one of `choices`.
std::string conf_path(std::string_view key, std::string_view value);
void conf_choice(std::string_view key, std::string_view value, std::initializer_list<std::string_view> choices);

// The text of a small file named by --rdzv_conf KEY=PATH (a secret, a password), its trailing
// newlines dropped: a regular file of at most 64 KiB, not empty (`what`: what to put in it).
std::string read_secret_file(const char* key, const std::string& path, const char* what);

// "--rdzv_endpoint=TEXT: PROBLEM; expected ...": one line naming the flag and what is accepted.
RendezvousConfigError bad_endpoint(std::string_view endpoint, std::string_view problem);

}  // namespace ddprun::elastic
