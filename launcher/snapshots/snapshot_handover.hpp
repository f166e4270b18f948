// What the commit watch (commit_watch.hpp) saw, handed to the replication of a job of several
// nodes (ddprun/snapshot_replication.hpp): the rules, tested as a table with a recording
// replication (tests/launcher/snapshot_handover_test.cpp).
#pragma once

#include <string>
#include <vector>

#include "ddprun/snapshot_replication.hpp"
#include "snapshots/commit_index.hpp"

namespace ddprun::launcher {

// A commit is copied; a commit by rename also removes the name it came from (the temporary name,
// when the replication had it). A commit that a later change of the batch renames away is not
// copied: the bytes go once, under their final name. A removal is copied only when the file is gone from `folder`: a
// committed file being written again is said removed as its writing starts (commit_index.hpp),
// and the other nodes keep their copy until the new version's commit replaces it.
void hand_over(const std::vector<SnapshotChange>& changes, const std::string& folder,
               elastic::SnapshotReplication& replication);

// The files a round's end swept (half-written): what was committed under those names before is
// fetched back from the other nodes by the next restore.
void hand_over_swept(const std::vector<Uncommitted>& files, elastic::SnapshotReplication& replication);

}  // namespace ddprun::launcher
