#include "snapshots/snapshot_handover.hpp"

#include <sys/stat.h>

namespace ddprun::launcher {

namespace {

// Whether the bytes committed by changes[i] are renamed to another name later in the batch: a
// writer that closes its temporary file and then renames it (torch.save to a temporary name, then
// os.replace) commits twice in a few microseconds; the copy goes once, under its final name.
bool renamed_later(const std::vector<SnapshotChange>& changes, std::size_t i) {
  for (std::size_t j = i + 1; j < changes.size(); ++j) {
    const SnapshotChange& later = changes[j];
    if (later.kind == SnapshotChange::Kind::kCommitted && later.from == changes[i].path) return true;
    if (later.path == changes[i].path) return false;  // written again under this name first
  }
  return false;
}

}  // namespace

void hand_over(const std::vector<SnapshotChange>& changes, const std::string& folder,
               elastic::SnapshotReplication& replication) {
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const SnapshotChange& change = changes[i];
    if (change.kind == SnapshotChange::Kind::kCommitted) {
      if (renamed_later(changes, i)) continue;
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
