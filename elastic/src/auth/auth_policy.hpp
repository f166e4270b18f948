// How the nodes of a job prove to each other that they belong to it, decided once before
// anything starts: the rules as a pure function (choose_auth, tested as a table), and
// decide_auth() (declared in ddprun/rendezvous_config.hpp for the launcher), which gathers the
// facts, probes munged only where MUNGE is a candidate, and fills in the configuration.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/backend_entry.hpp"
#include "ddprun/rendezvous_config.hpp"
#include "ddprun/snapshot_replication.hpp"

namespace ddprun::elastic {

struct AuthInputs {
  // The backend's (its row's); by default ddprun's authentication guards it.
  AuthStance stance;
  AuthMode requested = AuthMode::kAuto;  // --rdzv_conf auth
  bool has_secret = false;
  std::string secret_source;  // "secret_file" or "DDPRUN_RDZV_SECRET", for messages
  std::string slurm_job_id;   // empty outside SLURM
  std::string run_id;
};

struct AuthDecision {
  AuthMode mode = AuthMode::kNone;  // kSecret, kMunge or kNone; never kAuto
  std::string munge_scope;          // with kMunge: what every node's credentials name
  std::string line;                 // to print for the user (without '\n'); empty: nothing
};

// The multi-node rendezvous's authentication:
//   a backend its service guards (its stance says so: etcd's TLS and users)
//              none of ddprun's: auth= is refused, a secret is said to have no effect
//   a secret   the secret, unless auth=munge or auth=none contradicts it (refused)
//   auth=secret without a secret: refused
//   auth=none  open, with a warning
//   auth=auto  outside SLURM: open, with a warning; under SLURM: MUNGE if munged answers, else
//              open with a warning that says why not
//   auth=munge MUNGE (also outside SLURM); refused when munged does not answer
// `munge_problem` is called only where MUNGE is a candidate: "" when munged answers, else why it
// cannot be used. Throws RendezvousConfigError when the choice cannot work.
AuthDecision choose_auth(const AuthInputs& in, const std::function<std::string()>& munge_problem);

struct ReplicationAuthInputs {
  bool ddprun_guards = true;                   // the rendezvous's backend is ddprun's to authenticate
  AuthMode rendezvous = AuthMode::kNone;       // as choose_auth decided it
  std::string rendezvous_scope;                // with kMunge
  bool has_secret = false;
  std::string slurm_job_id;                    // empty outside SLURM
  std::string run_id;
};

// The snapshot copies between the nodes (ddprun/snapshot_replication.hpp); never unauthenticated:
//   the rendezvous uses MUNGE          MUNGE, with its scope
//   a secret                           the secret (with etcd too: it authenticates only the copies)
//   ddprun's rendezvous, open          none: the line says to give a secret, or to use MUNGE
//   etcd without a secret, under SLURM MUNGE (scope: the SLURM job id and the run id) if munged
//                                      answers, said in a line; else none, the line says why
//   etcd without a secret, outside     none: the line says to give a secret
// kMunge, kSecret or kNone; `line` (kNone: why the files stay on their node, and what to set).
AuthDecision choose_replication_auth(const ReplicationAuthInputs& in, const std::function<std::string()>& munge_problem);

std::optional<ReplicationAuth> decide_replication_auth(RendezvousConfig& config, const AuthStance& stance,
                                                       const std::string& slurm_job_id, const std::string& slurm_conf,
                                                       std::string& line);

// decide_auth (ddprun/rendezvous_config.hpp) for a backend of `stance`; src/backends.cpp passes
// the chosen row's.
std::string decide_auth(RendezvousConfig& config, const AuthStance& stance, const std::string& slurm_job_id,
                        const std::string& slurm_conf);

}  // namespace ddprun::elastic
