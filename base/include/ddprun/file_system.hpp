// Small facts about folders that more than one part decides on: whether a folder is a tmpfs
// ddprun may write in (ddprun's private folder, launcher/main.cpp; the job's snapshot folder,
// launcher/snapshots/), and a user's text made safe as part of a file name.
#pragma once

#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cctype>
#include <string>

namespace ddprun {

// True when `path` is on a tmpfs (memory, not a disk).
inline bool on_tmpfs(const std::string& path) {
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

// True when `path` is a tmpfs folder this process may make entries in: /dev/shm, usually.
inline bool writable_tmpfs(const std::string& path) {
  return on_tmpfs(path) && ::access(path.c_str(), W_OK | X_OK) == 0;
}

// `text` as part of a folder name: at most 64 characters of letters, digits, '-', '_' and '.',
// any other byte '_' (a user's --rdzv_id may hold '/', "..", or be long).
inline std::string path_safe(const std::string& text) {
  std::string out = text.substr(0, 64);
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return out;
}

}  // namespace ddprun
