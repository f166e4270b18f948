#include "snapshots/commit_watch.hpp"

#include "ddprun/inotify.hpp"
#include "ddprun/snapshot_replication.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

namespace ddprun::launcher {

namespace {

// The least time between two reads of the loop's own (not a reap's, not a round end's): a 4 KiB
// write loop of 512 MiB cost ddprun a third of a core read at every write. Longer, and a close
// made that long before a worker's kill is read only after it (doubted, README).
constexpr std::chrono::milliseconds kReadPause{5};

constexpr std::uint32_t kFolderEvents = IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |
                                        IN_DELETE | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK;

std::string joined(const std::string& folder, const std::string& name) {
  return folder.empty() ? name : folder + "/" + name;
}

// What lstat() sees at `path`: a regular file's or symbolic link's identity; nullopt otherwise.
std::optional<FileIdentity> identity_of(const std::string& path, bool* symlink = nullptr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) return std::nullopt;
  if (symlink) *symlink = S_ISLNK(st.st_mode);
  return FileIdentity{static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(st.st_size),
                      static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
}

std::string read_small(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

CommitWatch::CommitWatch(asio::io_context& io, UniqueFd instance, std::string folder, Hooks hooks)
    : inotify_(io), pause_(io), root_(std::move(folder)), hooks_(std::move(hooks)) {
  if (!instance) instance.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!instance) {
    cannot_watch(root_, errno, "fs.inotify.max_user_instances");
    return;
  }
  inotify_.assign(instance.release());
  // Every file there now counts as committed: no worker of this job runs yet, so a file found is
  // one a run of this job kept (a requeue), whole as far as anyone can tell.
  Batch start;
  start.complete_scan = true;
  watch_tree("", &start.events, {});
  if (!watching_) return;
  changed(index_.apply(start));
  wait();
}

CommitWatch::~CommitWatch() {
  pause_.cancel();
  std::error_code ignored;
  inotify_.close(ignored);
}

void CommitWatch::watch_tree(const std::string& relative, std::vector<FolderEvent>* found,
                             const std::vector<std::string>& open) {
  if (!watching_) return;
  // Where the replication receives copies until they are whole: ddprun's, never the workers'.
  if (relative == elastic::kIncomingFolder) return;
  const std::string path = relative.empty() ? root_ : root_ + "/" + relative;
  // The watch first, then the listing: a file made between the two is listed, or its events come.
  const int wd = ::inotify_add_watch(inotify_.native_handle(), path.c_str(), kFolderEvents);
  if (wd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return;  // gone already: its removal's events follow
    cannot_watch(path, errno, "fs.inotify.max_user_watches");
    return;
  }
  folder_of_watch_[wd] = relative;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string below = joined(relative, name);
    struct stat st {};
    if (::lstat((root_ + "/" + below).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      watch_tree(below, found, open);
    } else if (const auto id = identity_of(root_ + "/" + below)) {
      FolderEvent ev;
      ev.kind = FolderEvent::Kind::kFound;
      ev.path = below;
      ev.now = id;
      ev.open_for_writing = std::find(open.begin(), open.end(), below) != open.end();
      found->push_back(std::move(ev));
    }
  }
  ::closedir(dir);
}

void CommitWatch::cannot_watch(const std::string& path, int error, const char* limit) {
  watching_ = false;
  if (!hooks_.say) return;
  hooks_.say(
      fmt::format("ddprun: snapshots: cannot watch {} ({}{}{}); files left half-written by a worker's death "
                  "are not told from whole ones in this run\n",
                  path, std::strerror(error), error == ENOSPC || error == EMFILE ? ": raise " : "",
                  error == ENOSPC || error == EMFILE ? limit : ""));
}

void CommitWatch::forget_tree(const std::string& relative) {
  for (auto it = folder_of_watch_.begin(); it != folder_of_watch_.end();) {
    const std::string& f = it->second;
    if (f == relative ||
        (f.size() > relative.size() && f.compare(0, relative.size(), relative) == 0 && f[relative.size()] == '/')) {
      ::inotify_rm_watch(inotify_.native_handle(), it->first);
      it = folder_of_watch_.erase(it);
    } else {
      ++it;
    }
  }
}

void CommitWatch::wait() {
  inotify_.async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
    if (ec || !inotify_.is_open()) return;
    read_batch({}, false);
    // A writer's every write is an event: read at most every kReadPause, the writes of that
    // time coalesced by the kernel, rather than wake per write (a reap still reads at once).
    pause_.expires_after(kReadPause);
    pause_.async_wait([this](std::error_code ec) {
      if (!ec) wait();
    });
  });
}

std::vector<CommitWatch::Raw> CommitWatch::read_queued(bool* overflowed) {
  std::vector<Raw> raw;
  read_inotify_events(inotify_.native_handle(), [&](const inotify_event& event) {
    if (event.mask & IN_Q_OVERFLOW) *overflowed = true;
    raw.push_back({event.wd, event.mask, event.cookie, event.len > 0 ? std::string(event.name) : ""});
  });
  return raw;
}

void CommitWatch::read_batch(const std::vector<Worker>& reaped, bool killed) {
  if (!watching_) return;
  bool overflowed = false;
  const std::vector<Raw> raw = read_queued(&overflowed);
  const bool reaping = !reaped.empty() || killed;
  if (raw.empty() && !reaping) return;
  // After the read, never before: a close this batch holds was queued before the read, so a
  // worker that made it while dying was exiting (PF_EXITING, set before its files are closed)
  // or a zombie by now; only ddprun reaps its workers, on this thread, and it reads first.
  Batch b;
  b.round = round_;
  b.killed = killed;
  for (const Worker& w : reaped) b.ending.push_back({w.pid, w.rank});
  const std::vector<Worker> workers = hooks_.workers ? hooks_.workers() : std::vector<Worker>{};
  for (const Worker& w : workers) {
    if (worker_seen(read_small(fmt::format("/proc/{}/stat", w.pid))) != WorkerSeen::kRunning) {
      b.ending.push_back({w.pid, w.rank});
    }
  }
  const bool scans = overflowed || std::any_of(raw.begin(), raw.end(), [](const Raw& r) {
                       return (r.mask & IN_ISDIR) && (r.mask & (IN_CREATE | IN_MOVED_TO));
                     });
  const std::vector<std::string> open = scans ? open_for_writing() : std::vector<std::string>{};
  if (overflowed) {
    // Events were lost: the folder is listed again, and each file that changed since it was
    // committed is judged as the batch's closes are (and kept out while a worker writes it).
    // Adding a watch to a folder watched already gives its descriptor again; a folder gone is
    // left out, its watch's IN_IGNORED to come.
    folder_of_watch_.clear();
    b.complete_scan = true;
    watch_tree("", &b.events, open);
  } else {
    b.events = events_of(raw, open);
  }
  if (!watching_) return;
  std::vector<SnapshotChange> changes = index_.apply(b);
  for (const Worker& w : reaped) {
    const auto more = index_.worker_ended(w.pid, w.killed);
    changes.insert(changes.end(), more.begin(), more.end());
  }
  if (overflowed && hooks_.say) {
    long long whole = 0;
    long long not_whole = 0;
    for (const auto& [path, e] : index_.entries()) (e.state == CommitIndex::State::kCommitted ? whole : not_whole)++;
    hooks_.say(
        fmt::format("ddprun: snapshots: inotify's queue overflowed (fs.inotify.max_queued_events): events "
                    "were lost; {} listed again: {} files committed, {} not ({})\n",
                    root_, whole, not_whole,
                    !b.ending.empty() || b.killed ? "a worker was ending: files changed since their commit are not"
                                                  : "those a worker holds open for writing"));
  }
  changed(changes);
}

std::vector<FolderEvent> CommitWatch::events_of(const std::vector<Raw>& raw, const std::vector<std::string>& open) {
  using Kind = FolderEvent::Kind;
  std::vector<FolderEvent> out;
  std::map<std::uint32_t, std::string> folder_moved_from;  // cookie -> folder, moved in this read
  for (const Raw& r : raw) {
    if (r.mask & IN_IGNORED) {
      folder_of_watch_.erase(r.wd);
      continue;
    }
    const auto watch = folder_of_watch_.find(r.wd);
    if (watch == folder_of_watch_.end() || r.name.empty()) continue;
    FolderEvent ev;
    ev.path = joined(watch->second, r.name);
    ev.cookie = r.cookie;
    if (r.mask & IN_ISDIR) {
      ev.folder = true;
      if (r.mask & IN_CREATE) {
        watch_tree(ev.path, &out, open);  // files made before the watch: found
      } else if (r.mask & IN_MOVED_FROM) {
        folder_moved_from[r.cookie] = ev.path;
        ev.kind = Kind::kMovedFrom;
        out.push_back(ev);
      } else if (r.mask & IN_MOVED_TO) {
        const auto from = folder_moved_from.find(r.cookie);
        if (from != folder_moved_from.end()) {
          // Moved within the folder: its watches (and those below it) now name the new path.
          for (auto& [wd, folder] : folder_of_watch_) {
            if (folder == from->second) {
              folder = ev.path;
            } else if (folder.size() > from->second.size() &&
                       folder.compare(0, from->second.size(), from->second) == 0 &&
                       folder[from->second.size()] == '/') {
              folder = ev.path + folder.substr(from->second.size());
            }
          }
          folder_moved_from.erase(from);
          ev.kind = Kind::kMovedTo;
          out.push_back(ev);
        } else {
          ev.kind = Kind::kMovedTo;
          out.push_back(ev);
          watch_tree(ev.path, &out, open);  // moved in: what it holds is found
        }
      }
      continue;
    }
    const std::string full = root_ + "/" + ev.path;
    bool symlink = false;
    struct stat st {};
    ev.now = identity_of(full, &symlink);
    if (r.mask & IN_CREATE) {
      // Gone already (renamed or removed later in this read: its events follow) is a file made.
      if (!ev.now && ::lstat(full.c_str(), &st) == 0) continue;  // a fifo, a socket
      ev.kind = symlink ? Kind::kLinked : Kind::kCreated;
    } else if (r.mask & IN_MODIFY) {
      ev.kind = Kind::kModified;
    } else if (r.mask & IN_CLOSE_WRITE) {
      ev.kind = Kind::kClosed;
    } else if (r.mask & IN_MOVED_FROM) {
      ev.kind = Kind::kMovedFrom;
    } else if (r.mask & IN_MOVED_TO) {
      ev.kind = Kind::kMovedTo;
    } else if (r.mask & IN_DELETE) {
      ev.kind = Kind::kDeleted;
    } else {
      continue;
    }
    out.push_back(std::move(ev));
  }
  // A folder moved out (its other half not in this read): its watches go, so that nothing outside
  // the folder is reported under its old name; moved back in later, it is watched and found again.
  for (const auto& [cookie, folder] : folder_moved_from) forget_tree(folder);
  return out;
}

std::vector<std::string> CommitWatch::open_for_writing() const {
  std::vector<std::string> open;
  const std::vector<Worker> workers = hooks_.workers ? hooks_.workers() : std::vector<Worker>{};
  const std::string prefix = root_ + "/";
  for (const Worker& w : workers) {
    const std::string fds = fmt::format("/proc/{}/fd", w.pid);
    DIR* dir = ::opendir(fds.c_str());
    if (dir == nullptr) continue;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      std::array<char, 4096> target{};
      const ssize_t n = ::readlink((fds + "/" + entry->d_name).c_str(), target.data(), target.size() - 1);
      if (n <= 0) continue;
      const std::string path(target.data(), static_cast<std::size_t>(n));
      if (path.compare(0, prefix.size(), prefix) != 0) continue;
      // fdinfo's "flags:" is octal; the access mode is its low two bits.
      std::istringstream info(read_small(fmt::format("/proc/{}/fdinfo/{}", w.pid, entry->d_name)));
      std::string key;
      std::string value;
      while (info >> key >> value) {
        if (key != "flags:") continue;
        if ((std::stoul(value, nullptr, 8) & O_ACCMODE) != O_RDONLY) open.push_back(path.substr(prefix.size()));
        break;
      }
    }
    ::closedir(dir);
  }
  return open;
}

void CommitWatch::reaped(const std::vector<Worker>& ended) { read_batch(ended, false); }

void CommitWatch::end_round() {
  if (!watching_) return;
  read_batch({}, true);
  std::vector<SnapshotChange> changes;
  const std::vector<Uncommitted> gone = index_.end_round(&changes);
  for (const Uncommitted& f : gone) ::unlink((root_ + "/" + f.path).c_str());
  if (!gone.empty()) {
    if (hooks_.say) hooks_.say(removed_line(gone));
    if (hooks_.removed) hooks_.removed(gone);
  }
  changed(changes);
}

void CommitWatch::stop() {
  if (!watching_) return;
  watching_ = false;
  for (const auto& [wd, folder] : folder_of_watch_) ::inotify_rm_watch(inotify_.native_handle(), wd);
  folder_of_watch_.clear();
}

void CommitWatch::changed(const std::vector<SnapshotChange>& changes) {
  if (!changes.empty() && hooks_.changed) hooks_.changed(changes);
}

}  // namespace ddprun::launcher
