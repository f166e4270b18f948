// How this node takes part in the job's rendezvous: torchrun's --rdzv_backend, --rdzv_endpoint,
// --rdzv_id, --rdzv_conf, --nnodes, --node_rank, --nproc_per_node, --local_addr, --max_restarts,
// --master_addr and --master_port as one value, filled in by the launcher and checked by
// validate() before make_rendezvous() uses it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rdzv_backend.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::elastic {

// A setting the user gave that cannot work; the launcher exits with exit_code::kUsage. The type
// of every bad option value, so that --rdzv_conf's values are read by the parsers every option
// source shares (config/include/ddprun/parse.hpp).
using RendezvousConfigError = config::UsageError;

// torchrun's backend names (config/include/ddprun/rdzv_backend.hpp parses them). What each one
// is, reads and checks is its row in the table of backends (src/backends.cpp).
using Backend = config::RdzvBackend;

inline constexpr int kDefaultEndpointPort = 29400;  // torchrun's c10d default
inline constexpr int kDefaultMasterPort = 29500;    // torchrun's --master_port default

// Every time limit of the rendezvous, in seconds, each settable as --rdzv_conf KEY=VALUE.
struct RendezvousTimeouts {
  // For at least MIN nodes to join: at the start, and again whenever lost nodes leave fewer
  // than MIN. A client also gives up reaching the endpoint after this long.
  double join_timeout = 600;
  // Once MIN nodes have joined the first round, how long more may join before it starts (MAX
  // nodes start it at once). Later rounds start at once: every node the job knows is there.
  double last_call_timeout = 30;
  // For every node to report its workers stopped after a round ended. Longer than the
  // launcher's SIGTERM->SIGKILL grace (30 s by default), so that a slow stop is not an error.
  double close_timeout = 60;
  double heartbeat_interval = 0.5;  // between heartbeats, in both directions
  // Silence after which a node, or the rendezvous host, counts as lost. A closed connection
  // counts at once.
  double heartbeat_timeout = 5;
  // For a new connection to the rendezvous host to authenticate (or, without a secret, to
  // join); then it is closed. Nothing about the job is told to it before.
  double auth_timeout = 5;
};

// How the nodes prove to each other that they belong to the job (--rdzv_conf auth=...).
//   auto:   the secret when one is given; else MUNGE under SLURM when munged answers; else none
//   secret: the secret (--rdzv_conf secret_file=PATH or DDPRUN_RDZV_SECRET), required
//   munge:  MUNGE, required (also outside SLURM, on any cluster that runs munged)
//   none:   an open rendezvous, as torchrun's
enum class AuthMode { kAuto, kSecret, kMunge, kNone };

// When a failed round is restarted, besides the --max_restarts budget (restart_policy.hpp in
// src/core/): --restart_on, --restart_backoff_max, --crash_loop_limit, --restart_window. The
// coordinator's settings (the rendezvous host's, or the etcd leader's) decide for every node.
struct RestartSettings {
  bool restart_on_any = false;  // also restart what a restart cannot fix
  double backoff_max = 60;      // the most seconds to wait before restarting a crash loop
  int crash_loop_limit = 5;     // failures in a row with no progress that end the job; 0: never
  double window = 0;            // max_restarts counts the restarts of the last `window` s; 0: all
  bool operator==(const RestartSettings& o) const {
    return restart_on_any == o.restart_on_any && backoff_max == o.backoff_max &&
           crash_loop_limit == o.crash_loop_limit && window == o.window;
  }
  bool operator!=(const RestartSettings& o) const { return !(*this == o); }
};

struct RendezvousConfig {
  Backend backend = Backend::kStatic;
  // --rdzv_endpoint as "host[:port]". For the static backend it replaces master_addr and, when it
  // has a port, master_port (torchrun: the endpoint is master_addr:master_port); empty: the
  // static backend meets at master_addr:master_port.
  std::string endpoint;
  std::string master_addr = "127.0.0.1";
  // --master_port; 0: not given. A static rendezvous of several nodes without an endpoint meets
  // at master_addr:master_port (29500 when not given, as torchrun). See single_node_master().
  int master_port = 0;
  std::string run_id;      // --rdzv_id; required for a multi-node c10d job
  int min_nodes = 1;       // --nnodes=MIN:MAX, or N for both
  int max_nodes = 1;
  int node_rank = -1;      // --node_rank; -1: any rank the rendezvous picks
  int nproc = 1;           // --nproc_per_node, already resolved to a number
  std::string local_addr;  // --local_addr; empty: the address this node uses to reach the endpoint
  int max_restarts = 0;    // job-wide budget of restarts after worker failures
  RestartSettings restart;
  // The launcher of the node that hosts global rank 0 serves the workers' c10d store at
  // MASTER_ADDR:MASTER_PORT, and every worker is a client of it (torchrun's agent store,
  // TORCHELASTIC_USE_AGENT_STORE=True). False (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1): rank 0 of
  // the workers hosts it. The setting of the node of rank 0 decides for each round.
  bool agent_store = true;
  // This node's snapshot replicator (ddprun/snapshot_replication.hpp), told to the others in its
  // join; port 0: none (one node, --snapshot=off, no key for the copies: decide_replication_auth).
  std::string snapshot_node;
  int snapshot_port = 0;
  // --chaos as config::chaos_text() writes it; every node must have the same (join_refusal.hpp).
  std::string chaos = "off";
  std::optional<bool> is_host;  // --rdzv_conf is_host=0|1; unset: see hosts_rendezvous()
  RendezvousTimeouts timeouts;
  // The job's secret, from --rdzv_conf secret_file=PATH or DDPRUN_RDZV_SECRET (load_secret());
  // empty: the rendezvous is open, as torchrun's. Never printed, logged or given to workers.
  std::string secret;
  std::string secret_file;  // --rdzv_conf secret_file
  AuthMode auth = AuthMode::kAuto;  // --rdzv_conf auth; decide_auth() resolves kAuto
  // --rdzv_conf munge_socket: munged's socket; empty: slurm.conf's AuthInfo socket, else
  // libmunge's default (decide_auth() fills it in).
  std::string munge_socket;
  // Set by decide_auth() when the nodes authenticate with MUNGE: what every node's credentials
  // must name (the SLURM job id and the run id). Empty: a secret, or none.
  std::string munge_scope;
  // --rdzv_conf max_connections: connections the rendezvous host keeps at once; 0: see
  // connection_limit().
  int max_connections = 0;
  // --rdzv_conf max_membership_changes: rounds ended by nodes joining or leaving that cost no
  // restart; after that each costs one of --max_restarts. -1: 4 per node (--nnodes MAX).
  int max_membership_changes = -1;
  // --rdzv_conf spares: nodes kept beyond --nnodes MAX as hot spares (joined, no workers, the
  // earliest joined replaces a lost node in the next round); a node beyond them is refused.
  // -1: any number.
  int spares = -1;
  // --rdzv_conf quarantine_after and quarantine_window (seconds): a node whose workers are the
  // root cause of that many hardware-like failures within the window is left out of the job
  // when it can go on without it (core/quarantine.hpp). 0 (either): never.
  int quarantine_after = 2;
  double quarantine_window = 600;
  // The --rdzv_conf keys a backend's row adds (src/backends.cpp lists the rows), by name, as
  // given once their row has checked them (a password_file's password as "password"); the
  // backend reads its own into its settings when it is made.
  std::map<std::string, std::string> backend_conf;
};

// "host[:port]" split; "[v6addr]:port" accepted.
struct Endpoint {
  std::string host;
  int port = 0;
};
// Throws RendezvousConfigError, naming --rdzv_endpoint, on an empty host or a bad port.
Endpoint parse_endpoint(std::string_view text, int default_port);

// The functions below that depend on the backend are defined in src/backends.cpp, which consults
// the backend's row.

// Where the nodes meet: --rdzv_endpoint (the etcd backend: its first member), or for the static
// backend without one, --master_addr:--master_port (as torchrun does).
Endpoint rendezvous_endpoint(const RendezvousConfig& config);

// MASTER_ADDR and MASTER_PORT of a single-node job; port 0: a free port, picked and held by
// the rendezvous. For the static backend, --rdzv_endpoint when given (its port, or --master_port
// when it has none), as torchrun does; otherwise --master_addr and --master_port. A job of
// several nodes instead gives its workers the address of the node with group rank 0 and a
// free port held there: the endpoint's port is taken by ddprun's own rendezvous server.
Endpoint single_node_master(const RendezvousConfig& config);

// Applies --rdzv_conf "key=value,..." split as torchrun 2.11 does (every comma, the first '=',
// white space trimmed; a quote no shell removed stays in its key or value). Keys: join_timeout,
// last_call_timeout, close_timeout, heartbeat_interval, heartbeat_timeout, auth_timeout (seconds),
// is_host, secret_file, auth (auto|secret|munge|none), munge_socket, max_connections,
// max_membership_changes, spares, quarantine_after, quarantine_window, every backend row's own
// (etcd's protocol, cacert, cert, key, user, password, password_file), and torchrun's `timeout`
// for join_timeout. Any other key is accepted: the lines returned name each and why it is not
// used, for the launcher to print. Throws RendezvousConfigError on a bad value of a key ddprun
// reads (but c10d's `timeout`, which torchrun's c10d backend does not read either: a line), or an
// item without '='.
std::vector<std::string> apply_rdzv_conf(std::string_view conf, RendezvousConfig& config);

// Fills config.secret from config.secret_file when set (trailing newlines dropped), else from
// `env_secret` (DDPRUN_RDZV_SECRET; null when unset), and the files the backends' keys name
// (etcd's password from password_file) when set. Throws RendezvousConfigError when a file is not a regular file of at most 64 KiB,
// cannot be read or is empty, or when both password and password_file are given.
void load_secret(RendezvousConfig& config, const char* env_secret);

// Decides how this node authenticates (config.auth; the rules: choose_auth() in
// src/auth/auth_policy.hpp, the backend's stance from its row) and fills in munge_scope and
// munge_socket when it is MUNGE (checking that munged answers). For a backend that its service
// guards (etcd): refuses auth=, and says that a secret has no effect. `slurm_job_id`: SLURM_JOB_ID,
// empty outside SLURM; `slurm_conf`: the path of slurm.conf, read for its AuthInfo socket when no
// munge_socket is given (a file that cannot be read names none). Returns the line to print for the
// user: the rendezvous is authenticated with MUNGE, or a warning that it is open and why. Throws
// RendezvousConfigError when the choice cannot work (auth=munge without munged, auth=secret
// without a secret, a secret with auth=munge or none). Call after load_secret().
std::string decide_auth(RendezvousConfig& config, const std::string& slurm_job_id, const std::string& slurm_conf);

// The connections the rendezvous host keeps at once: max_connections when given, else 2 per
// node (--nnodes MAX) plus 16 but at most a quarter of `fd_limit` (the soft RLIMIT_NOFILE), so
// that the rest stays for the workers' pipes and the store. At least 4.
int connection_limit(const RendezvousConfig& config, long fd_limit);

// Throws RendezvousConfigError naming the flag when the configuration cannot work.
void validate(const RendezvousConfig& config);

}  // namespace ddprun::elastic
