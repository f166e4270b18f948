#include "snapshots/snapshot_place.hpp"

#include <cstdint>

#include <fmt/format.h>

#include "ddprun/file_system.hpp"
#include "ddprun/input_limits.hpp"

namespace ddprun::launcher {

std::string snapshot_folder_name(unsigned uid, const std::string& run_id) {
  std::string name = fmt::format("ddprun-snapshots.{}.{}", uid, path_safe(run_id));
  if (path_safe(run_id) != run_id) {
    std::uint32_t hash = 2166136261u;  // FNV-1a: the same in every build (std::hash need not be)
    for (const char c : run_id) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
    name += fmt::format("-{:08x}", hash);
  }
  return name;
}

SnapshotPlace snapshot_place(const std::string& run_id, unsigned long long size_cap, const SnapshotFacts& facts) {
  SnapshotPlace place;
  const std::string parent = facts.dev_shm ? "/dev/shm" : !facts.tmpdir.empty() ? facts.tmpdir : "/tmp";
  place.path = parent + "/" + snapshot_folder_name(facts.uid, run_id);
  place.in_memory = facts.dev_shm || facts.tmpdir_tmpfs;
  place.mount = size_cap > 0;
  return place;
}

FoundVerdict judge_found(const std::string& path, const FoundEntry& found, unsigned uid) {
  using Kind = FoundEntry::Kind;
  const auto refuse = [&](const std::string& what, const std::string& remedy) {
    return FoundVerdict{FoundAction::kRefuse,
                        fmt::format("snapshot folder {} {}: ddprun makes it itself and takes over nothing else "
                                    "there; {}, or run with --snapshot=off",
                                    shown(path, 200), what, remedy)};
  };
  switch (found.kind) {
    case Kind::kNone: return {FoundAction::kMake, ""};
    case Kind::kSymlink: return refuse("is a symbolic link", "remove it");
    case Kind::kOther: return refuse("is not a folder", "remove it");
    case Kind::kFolder: break;
  }
  if (found.owner != uid) {
    return refuse(fmt::format("belongs to user {}, not to user {}", found.owner, uid),
                  "remove it as that user or root, give another --rdzv_id");
  }
  if ((found.mode & 077) != 0) {
    return refuse(fmt::format("is open to other users (mode {:04o}, not 0700)", found.mode & 07777),
                  "chmod 700 it if it is yours to resume from, remove it");
  }
  return {FoundAction::kReuse, ""};
}

bool removed_at_end(bool succeeded, bool keep, unsigned long long files) { return !keep && (succeeded || files == 0); }

std::string kept_line(const std::string& path, unsigned long long files, unsigned long long bytes,
                      const std::string& run_id) {
  return fmt::format(
      "ddprun: snapshots kept in {} ({}) for a rerun of job {} on this node (the same --rdzv_id); rm -r it to free "
      "that memory\n",
      path, holds_words(files, bytes), shown(run_id));
}

std::string holds_words(unsigned long long files, unsigned long long bytes) {
  return fmt::format("{} file{}, {}", files, files == 1 ? "" : "s", size_words(bytes));
}

}  // namespace ddprun::launcher
