#include "snapshots/snapshot_handover.hpp"

#include <sys/stat.h>

namespace ddprun::launcher {

void hand_over(const std::vector<SnapshotChange>& changes, const std::string& folder,
               elastic::SnapshotReplication& replication) {
  for (const SnapshotChange& change : changes) {
    if (change.kind == SnapshotChange::Kind::kCommitted) {
      if (!change.from.empty()) replication.removed(change.from);
      replication.committed(change.path);
      continue;
    }
    struct stat st {};
    if (::lstat((folder + "/" + change.path).c_str(), &st) == 0) continue;  // being written again
    replication.removed(change.path);
  }
}

void hand_over_swept(const std::vector<Uncommitted>& files, elastic::SnapshotReplication& replication) {
  for (const Uncommitted& file : files) replication.missing(file.path);
}

}  // namespace ddprun::launcher
