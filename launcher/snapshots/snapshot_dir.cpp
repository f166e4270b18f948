#include "snapshots/snapshot_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "ddprun/file_system.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/user_error.hpp"
#include "snapshots/snapshot_place.hpp"

namespace ddprun::launcher {

namespace fs = std::filesystem;

namespace {

FoundEntry look(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  FoundEntry found;
  found.kind = S_ISLNK(st.st_mode)   ? FoundEntry::Kind::kSymlink
               : S_ISDIR(st.st_mode) ? FoundEntry::Kind::kFolder
                                     : FoundEntry::Kind::kOther;
  found.owner = st.st_uid;
  found.mode = st.st_mode & 07777;
  return found;
}

// The files below `path` and their bytes (what the folder holds of the node's memory).
KeptSnapshots contents(const std::string& path) {
  KeptSnapshots kept{path, 0, 0};
  std::error_code ec;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (!it->is_regular_file(size_ec)) continue;
    ++kept.files;
    const auto size = it->file_size(size_ec);
    if (!size_ec) kept.bytes += size;
  }
  return kept;
}

// A file system of its own at `path` (a tmpfs ddprun mounted), and its size in bytes; 0 when
// `path` is a folder of its parent's file system.
unsigned long long own_tmpfs_size(const std::string& path) {
  struct stat here {};
  struct stat parent {};
  if (::stat(path.c_str(), &here) != 0 || ::stat((path + "/..").c_str(), &parent) != 0) return 0;
  if (here.st_dev == parent.st_dev) return 0;
  struct statfs sfs {};
  if (::statfs(path.c_str(), &sfs) != 0 || sfs.f_type != TMPFS_MAGIC) return 0;
  return static_cast<unsigned long long>(sfs.f_blocks) * static_cast<unsigned long long>(sfs.f_bsize);
}

// What the folder's file system holds at most, for the line that says a cap is not enforced.
std::string room_of(const std::string& path) {
  struct statfs sfs {};
  if (::statfs(path.c_str(), &sfs) != 0) return "";
  return size_words(static_cast<unsigned long long>(sfs.f_blocks) * static_cast<unsigned long long>(sfs.f_bsize));
}

}  // namespace

SnapshotDir SnapshotDir::open(const config::LaunchConfig& config, const std::string& run_id,
                              const std::map<std::string, std::string>& environ, std::ostream& say) {
  SnapshotDir dir;
  if (!config.snapshot) return dir;
  dir.keep_ = config.snapshot_keep;
  SnapshotFacts facts;
  facts.uid = ::getuid();
  if (const auto it = environ.find("TMPDIR"); it != environ.end()) facts.tmpdir = it->second;
  facts.dev_shm = writable_tmpfs("/dev/shm");
  facts.tmpdir_tmpfs = on_tmpfs(facts.tmpdir.empty() ? "/tmp" : facts.tmpdir);
  const SnapshotPlace place = snapshot_place(run_id, config.snapshot_dir_size, facts);
  const std::string& path = place.path;
  const std::string cap = fmt::format("--snapshot_dir_size ({})", size_words(config.snapshot_dir_size));

  // Made here, or found: two ddprun of one job on this machine may race to make it.
  bool made = false;
  for (int tries = 0;; ++tries) {
    const FoundVerdict verdict = judge_found(path, look(path), facts.uid);
    if (verdict.action == FoundAction::kRefuse) throw config::UsageError(verdict.why);
    if (verdict.action == FoundAction::kReuse) break;
    if (::mkdir(path.c_str(), 0700) == 0) {
      made = true;
      break;
    }
    if (errno != EEXIST || tries > 0) {
      throw config::UsageError(
          fmt::format("snapshot folder {}: cannot create it ({}); run with --snapshot=off to go without",
                      shown(path, 200), std::strerror(errno)));
    }
  }
  // The cap: a tmpfs of its own, mounted only on a folder made now (never over one that holds a
  // kept run's files). A requeue finds the mount the run before it made, and resizes it.
  std::string not_enforced;
  const unsigned long long mounted = own_tmpfs_size(path);
  dir.mounted_ = mounted > 0;
  if (place.mount) {
    const std::string options = fmt::format("size={},mode=0700,uid={},gid={}", config.snapshot_dir_size, facts.uid,
                                            ::getgid());
    if (mounted > 0) {
      if (mounted != config.snapshot_dir_size &&
          ::mount(nullptr, path.c_str(), nullptr, MS_REMOUNT | MS_NOSUID | MS_NODEV,
                  fmt::format("size={}", config.snapshot_dir_size).c_str()) != 0) {
        not_enforced = fmt::format("its tmpfs, kept from an earlier run, stays at {} ({})", size_words(mounted),
                                   std::strerror(errno));
      }
    } else if (!made) {
      not_enforced = "the folder was kept from an earlier run without a tmpfs of its own";
    } else if (::mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) == 0) {
      dir.mounted_ = true;
    } else {
      not_enforced = fmt::format("mounting a tmpfs of that size needs root (CAP_SYS_ADMIN) here ({})",
                                 std::strerror(errno));
    }
    if (!not_enforced.empty()) {
      say << fmt::format("ddprun: {} is not enforced: {}; DDPRUN_SNAPSHOT_DIR shares {} ({}) with the machine\n", cap,
                         not_enforced, fs::path(path).parent_path().string(), room_of(path));
    }
  }
  dir.held_ = UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.held_) {
    throw config::UsageError(
        fmt::format("snapshot folder {}: cannot open it ({}); run with --snapshot=off to go without", shown(path, 200),
                    std::strerror(errno)));
  }
  // What was opened is what was judged: nothing swapped in between.
  struct stat st {};
  if (::fstat(dir.held_.get(), &st) == 0) {
    const FoundEntry opened{FoundEntry::Kind::kFolder, st.st_uid, static_cast<unsigned>(st.st_mode & 07777)};
    const FoundVerdict verdict = judge_found(path, opened, facts.uid);
    if (verdict.action == FoundAction::kRefuse) throw config::UsageError(verdict.why);
  }
  // Alone (no other ddprun of the job holds it): a kept folder's contents are said once. Then
  // shared, so that another ddprun of the job on this machine sees this one.
  if (!made && ::flock(dir.held_.get(), LOCK_EX | LOCK_NB) == 0) {
    const KeptSnapshots kept = contents(path);
    if (kept.files > 0) {
      say << fmt::format(
          "ddprun: DDPRUN_SNAPSHOT_DIR={} holds what an earlier run of job {} kept there ({}): the workers see it\n",
          path, shown(run_id), holds_words(kept.files, kept.bytes));
    }
  }
  ::flock(dir.held_.get(), LOCK_SH);
  if (!place.in_memory && !dir.mounted_) {
    say << fmt::format(
        "ddprun: DDPRUN_SNAPSHOT_DIR={} is on disk, not in memory: /dev/shm is not a tmpfs this user "
        "may write in\n",
        path);
  }
  dir.path_ = path;
  dir.run_id_ = run_id;
  return dir;
}

// Old enough that no ddprun is between its mkdir() and its flock() on it.
constexpr int kStaleAfterSeconds = 60;

void SnapshotDir::remove_stale(const std::string& path) {
  if (path.empty()) return;
  const fs::path parent = fs::path(path).parent_path();
  const std::string prefix = fmt::format("ddprun-snapshots.{}.", ::getuid());
  struct stat parent_st {};
  if (::stat(parent.c_str(), &parent_st) != 0) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat st {};
    if (name.rfind(prefix, 0) != 0 || entry.path() == path || ::lstat(entry.path().c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || st.st_dev != parent_st.st_dev ||
        st.st_mtime > ::time(nullptr) - kStaleAfterSeconds) {
      continue;
    }
    const UniqueFd held(::open(entry.path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    // rmdir() removes it only when it is empty.
    if (held && ::flock(held.get(), LOCK_EX | LOCK_NB) == 0) ::rmdir(entry.path().c_str());
  }
}

SnapshotsLeft SnapshotDir::finish(bool succeeded) {
  SnapshotsLeft left;
  if (path_.empty()) return left;
  const KeptSnapshots kept = contents(path_);
  if (!removed_at_end(succeeded, keep_, kept.files)) {
    held_.reset();
    left.kept = kept;
    left.line = kept_line(kept.path, kept.files, kept.bytes, run_id_);
    return left;
  }
  // The last ddprun of the job on this machine to end removes it: the others' shared locks
  // refuse this one's exclusive lock.
  if (::flock(held_.get(), LOCK_EX | LOCK_NB) != 0) {
    held_.reset();
    return left;
  }
  std::error_code ec;
  if (mounted_ && ::umount2(path_.c_str(), MNT_DETACH) != 0) ec.assign(errno, std::generic_category());
  held_.reset();
  if (!ec) fs::remove_all(path_, ec);
  if (ec) {
    left.kept = kept;
    left.line = fmt::format("ddprun: could not remove the snapshot folder {} ({}); remove it to free its memory\n",
                            path_, ec.message());
  }
  return left;
}

}  // namespace ddprun::launcher
