// Where the job's snapshot folder (DDPRUN_SNAPSHOT_DIR, snapshot_dir.hpp) goes, and what ddprun
// does with an entry already at that path: pure functions of what the machine showed, tested as
// tables (tests/launcher/snapshot_place_test.cpp).
#pragma once

#include <string>

#include "ddprun/text.hpp"

namespace ddprun::launcher {

// What the machine offers, as SnapshotDir::open() reads it.
struct SnapshotFacts {
  unsigned uid = 0;
  std::string tmpdir;         // TMPDIR; "" when unset
  bool dev_shm = false;       // /dev/shm is a tmpfs this user may make entries in (writable_tmpfs())
  bool tmpdir_tmpfs = false;  // TMPDIR, else /tmp, is a tmpfs
};

struct SnapshotPlace {
  std::string path;
  bool in_memory = false;  // on a tmpfs, before any mount of ddprun's own
  bool mount = false;      // a cap was asked for: try a tmpfs of its own there (root only)
};

// The folder's name, the same at every start of the job on this node, whatever process or
// machine state: "ddprun-snapshots.<uid>.<run id>", the run id made path_safe(), followed by
// "-" and the FNV-1a hash of the whole run id when that changed it ("a/b" and "a_b" differ).
std::string snapshot_folder_name(unsigned uid, const std::string& run_id);

// /dev/shm when it is a tmpfs this user may write in: memory, and the same path for a requeue on
// this node whatever TMPDIR a new job gets. Else TMPDIR, else /tmp: in memory only when that is a
// tmpfs. `size_cap`: --snapshot_dir_size (0: none).
SnapshotPlace snapshot_place(const std::string& run_id, unsigned long long size_cap, const SnapshotFacts& facts);

// What lstat() found at the folder's path.
struct FoundEntry {
  enum class Kind { kNone, kFolder, kSymlink, kOther };
  Kind kind = Kind::kNone;
  unsigned owner = 0;
  unsigned mode = 0;  // the permission bits
};

enum class FoundAction { kMake, kReuse, kRefuse };
struct FoundVerdict {
  FoundAction action = FoundAction::kMake;
  std::string why;  // kRefuse: the one line, naming the path and what to do
};

// Nothing there: make it. This user's folder, open to no one else: reuse it (a requeue's, or
// another ddprun's of the same job on this machine). Anything else is refused, never followed or
// taken over: a symbolic link, something not a folder, another user's folder, a folder others
// may read or write.
FoundVerdict judge_found(const std::string& path, const FoundEntry& found, unsigned uid);

// Whether the folder goes at the job's end: after a success, and after a failure when it holds no
// file (nothing for a requeue to find); never with --snapshot_keep (`keep`).
bool removed_at_end(bool succeeded, bool keep, unsigned long long files);

// The line that says where a kept folder is, what it holds, how a rerun finds it and how to free
// its memory (the failure summary's last, or a --snapshot_keep success's).
std::string kept_line(const std::string& path, unsigned long long files, unsigned long long bytes,
                      const std::string& run_id);

// "1 file, 3 B", "2 files, 1.5 MiB": what a folder holds, as the user is told it.
std::string holds_words(unsigned long long files, unsigned long long bytes);

}  // namespace ddprun::launcher
