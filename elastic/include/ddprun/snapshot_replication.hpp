// The snapshot folder's replication between the nodes of a round, as the launcher sees it: every
// file its workers commit to DDPRUN_SNAPSHOT_DIR copied to every other node's folder, and what a
// node lacks fetched before its workers start (elastic/src/replica/README.md: the design).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

// What the restore at a round's start did, for the console and the event log.
struct RestoreOutcome {
  std::size_t fetched = 0;
  std::size_t removed = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::vector<std::string> lines;  // what to say: lost versions, members that did not answer
};

// The folder inside the snapshot folder where copies are received before they are whole, to be
// renamed into place: ddprun's, not the job's; never replicated, never judged by the commit watch.
inline constexpr const char* kIncomingFolder = ".ddprun-incoming";

class SnapshotReplication {
 public:
  using Say = std::function<void(const std::string& line)>;

  virtual ~SnapshotReplication() = default;
  // Its id and port, for the rendezvous's join (RendezvousConfig::snapshot_node, snapshot_port).
  virtual const std::string& node() const = 0;
  virtual int port() const = 0;
  // A round starts (RoundAssignment::snapshot_peers): `restored` is called, on a thread of the
  // replication, once this node holds the newest whole version of every file any member holds.
  virtual void start_round(int round, std::vector<SnapshotPeer> ring, std::function<void(RestoreOutcome)> restored) = 0;
  // A file of the folder (a path relative to it) committed, or removed, by this node's workers.
  virtual void committed(const std::string& path) = 0;
  virtual void removed(const std::string& path) = 0;
  // The file at `path` went from the folder, not by the job's removal: ddprun's sweep of a copy
  // half-written over it at a round's end. The next round's restore fetches the newest whole
  // version another node holds, rather than the other nodes removing theirs.
  virtual void missing(const std::string& path) = 0;
};

// How every link between two nodes' replications authenticates: with the job's secret, or with
// MUNGE (munged's socket, empty: libmunge's default; the scope every credential names: the SLURM
// job id and the run id, so that another job's nodes are refused). One of the two is set: the
// copies never go unauthenticated.
struct ReplicationAuth {
  std::string secret;
  std::string munge_socket;
  std::string munge_scope;  // non-empty: MUNGE
};

// The copies' authentication, after decide_auth() (ddprun/rendezvous_config.hpp), from the same
// facts (the rules: choose_replication_auth() in src/auth/auth_policy.hpp): MUNGE where the
// rendezvous uses it; else the job's secret; for a rendezvous that its service guards (etcd)
// without a secret, MUNGE under SLURM when munged answers. Empty when the copies cannot be
// authenticated. `line`: what to print for the user ("": nothing), with nothing to copy: why
// not and what to set.
std::optional<ReplicationAuth> decide_replication_auth(RendezvousConfig& config, const std::string& slurm_job_id,
                                                       const std::string& slurm_conf, std::string& line);

// Listens on every address of the node, on a free port; every link authenticates with `auth`
// (MUNGE is opened here). `replicas`: --snapshot_replicas (0: all; K: each file held by the K
// next nodes of the ring, shown on its own node and on the node that takes over its group rank).
// `say` is called on the replication's threads. Throws std::runtime_error when it cannot listen
// or munged does not answer.
std::unique_ptr<SnapshotReplication> make_snapshot_replication(const std::string& folder, const ReplicationAuth& auth,
                                                               int replicas, SnapshotReplication::Say say);

}  // namespace ddprun::elastic
