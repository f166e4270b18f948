// The job's snapshot folder on this node (issue 57): DDPRUN_SNAPSHOT_DIR, a folder in memory that
// ddprun makes at the job's start and keeps across worker deaths, restarts and rounds, so that a
// checkpoint a worker wrote there is read back by the next round's. Removed at the job's
// successful end (not with --snapshot_keep), kept when it fails, for a requeue of the same run id
// on this node. Where it goes and what is refused there: snapshot_place.hpp.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>

#include "ddprun/launch_config.hpp"
#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

// What a folder held at the job's end, when it stays.
struct KeptSnapshots {
  std::string path;
  unsigned long long files = 0;
  unsigned long long bytes = 0;
};

// The folder at the job's end: what stays (nullopt: removed, or left to another ddprun of the job
// on this machine to remove), and the line to say ("" none): where it stays and how a requeue
// finds it, or why it could not be removed.
struct SnapshotsLeft {
  std::optional<KeptSnapshots> kept;
  std::string line;
};

class SnapshotDir {
 public:
  SnapshotDir() = default;  // --snapshot=off: no folder
  SnapshotDir(SnapshotDir&&) = default;
  SnapshotDir& operator=(SnapshotDir&&) = default;

  // Makes the job's folder, 0700, or finds the one an earlier run of `run_id` kept (or another
  // ddprun of the same job on this machine uses), and holds it (a shared flock on the folder,
  // close-on-exec) until finish(). With --snapshot_dir_size, a tmpfs of that size of its own
  // where ddprun may mount one. Says to `say`, one line each, what the user must know: a folder
  // kept from an earlier run and what it holds, a folder that is not in memory, a cap that is not
  // enforced and why. Throws UsageError, before anything starts, for a path it may not use or a
  // folder it cannot make. Nothing with --snapshot=off.
  static SnapshotDir open(const config::LaunchConfig& config, const std::string& run_id,
                          const std::map<std::string, std::string>& environ, std::ostream& say);

  // The folder; "" with --snapshot=off.
  const std::string& path() const { return path_; }
  // The folder's descriptor, which holds its flock (-1: none): not the orphan guard's to hold.
  int lock_descriptor() const { return held_.get(); }

  // Removes, in `path`'s folder, this user's snapshot folders that are empty, held by no ddprun
  // and unchanged for a minute (no ddprun is then between making one and locking it): those of ddprun processes killed by SIGKILL, which cannot
  // remove theirs (a folder with files stays: a requeue's to find). For the orphan guard's
  // start-up chores, off the start's path.
  static void remove_stale(const std::string& path);

  // The job ended (`succeeded`: ddprun exits 0). Without --snapshot_keep, removes the folder when
  // the job succeeded or the folder is empty (nothing for a requeue to find), unless another ddprun of the job on this machine still
  // holds it (the last one to end removes it).
  SnapshotsLeft finish(bool succeeded);

 private:
  std::string path_;
  std::string run_id_;
  UniqueFd held_;         // the folder, open with a shared flock while this ddprun uses it
  bool mounted_ = false;  // a tmpfs ddprun mounted there (now or in the run that kept it)
  bool keep_ = false;     // --snapshot_keep
};

}  // namespace ddprun::launcher
