// One copy on a link, both ways: a file of the folder sent, a copy forwarded as it lands, a copy
// received and put in place when whole (replicator.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "ddprun/text.hpp"
#include "replica/link.hpp"
#include "replica/replicator.hpp"

namespace ddprun::elastic {

namespace {

// The parent folders of `path` under `folder`, made 0700 where missing; false when one is not a
// folder (a symbolic link, a file).
bool make_parents(const std::string& folder, const std::string& path) {
  std::string at = folder;
  std::size_t begin = 0;
  for (std::size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', begin)) {
    at += "/" + path.substr(begin, slash - begin);
    begin = slash + 1;
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) return false;
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  }
  return true;
}

// The line for a copy this node could not write: the file, the folder and the error; for a full
// folder, its size and what was free (--snapshot_dir_size's tmpfs, or the file system it shares).
// `part`: the bytes of the copy written before the failure, whose space comes back once the
// copy's last descriptor (a forwarder's too) is closed.
std::string receive_failure(const std::string& folder, const std::string& path, std::uint64_t size, int error,
                            std::uint64_t part = 0) {
  std::string line = fmt::format("snapshots: cannot receive the copy of {} ({}) in {}: {}", path, size_words(size),
                                 folder, std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) {
    // The folder's own tmpfs (a mount point: its device is not its parent's) is --snapshot_dir_size's.
    struct statvfs fs {};
    struct stat here {}, parent {};
    if (::statvfs(folder.c_str(), &fs) == 0) {
      const bool own = ::stat(folder.c_str(), &here) == 0 && ::stat((folder + "/..").c_str(), &parent) == 0 &&
                       here.st_dev != parent.st_dev;
      const std::uint64_t total = static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
      const std::uint64_t free = std::min(total, static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize + part);
      line += own ? fmt::format(" (the folder's --snapshot_dir_size is {}, {} free)", size_words(total), size_words(free))
                  : fmt::format(" (the file system it shares holds {}, {} free)", size_words(total), size_words(free));
    }
    line += "; a copy needs room for the whole file beside the version it replaces";
  }
  return line + fmt::format("; this node keeps what it had of {}", path);
}

}  // namespace

Replicator::Incoming::~Incoming() {
  if (fd >= 0) ::close(fd);
}

bool Replicator::receive_copy(ReplicaLink& link, const nlohmann::json& header, bool forward, std::uint64_t* bytes) {
  const std::string path = header.at("path").get<std::string>();
  const ManifestEntry entry = header.at("entry").get<ManifestEntry>();
  // K (--snapshot_replicas): a copy held for slot `slot`, not shown; forwarded `hops` - 1 further.
  const int slot = header.value("slot", -1);
  const int hops = header.value("hops", 0);
  if (!replicable_path(path)) throw LinkError(fmt::format("a copy of a path outside the folder: {}", path));
  if (slot > 1 << 20) throw LinkError(fmt::format("a copy for group rank {}", slot));

  bool wanted = false;
  std::shared_ptr<Incoming> incoming;
  std::string staging;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const ManifestEntry* held = slot >= 0 ? held_.try_emplace(slot, Manifest("")).first->second.find(path)
                                          : manifest_.find(path);
    wanted = held == nullptr || held->version < entry.version;
    if (wanted && !entry.removed) {
      staging = fmt::format("{}/{}/{}", settings_.folder, kIncomingFolder, ++incoming_count_);
      if (slot < 0) announced_[path] = std::max(announced_[path], entry.version);
    }
    // A version this node holds already, its restore having fetched it before its predecessor's
    // push came: forwarded from its file all the same, or the nodes after it never get it.
    if (!wanted && slot < 0 && forward && held != nullptr && held->version == entry.version && ring_.size() > 1 &&
        ring_[(self_ + 1) % ring_.size()].node != entry.version.origin) {
      queue_.push_back(OutItem{path, *held, nullptr});
      changed();
    }
    // A held copy this node has already (a push after a round's change): forwarded from it.
    if (!wanted && slot >= 0 && hops > 1 && held != nullptr && held->version == entry.version && forward &&
        ring_.size() > 2 && static_cast<int>((self_ + 1) % ring_.size()) != slot) {
      OutItem item{path, *held, nullptr};
      item.slot = slot;
      item.hops = hops - 1;
      item.held = true;
      queue_.push_back(std::move(item));
      changed();
    }
  }
  int out = -1;
  if (!staging.empty()) {
    out = ::open(staging.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (out < 0) {
      say_(receive_failure(settings_.folder, path, entry.size, errno));
      wanted = false;
    } else if (forward) {
      incoming = std::make_shared<Incoming>();
      incoming->fd = ::open(staging.c_str(), O_RDONLY | O_CLOEXEC);
      incoming->size = entry.size;
    }
  }
  if (wanted && forward) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot >= 0) {
      // K: forwarded until it has reached K nodes, never back to the slot's own node.
      if (hops > 1 && ring_.size() > 2 && static_cast<int>((self_ + 1) % ring_.size()) != slot) {
        OutItem item{path, entry, incoming};
        item.slot = slot;
        item.hops = hops - 1;
        queue_.push_back(std::move(item));
        changed();
      }
    } else {
      const bool next_is_origin = ring_.size() < 2 || ring_[(self_ + 1) % ring_.size()].node == entry.version.origin;
      if (!next_is_origin) {
        queue_.push_back(OutItem{path, entry, incoming});
        changed();
      }
    }
  }
  // The bytes, written as they come; a failure cuts the forwarded copy too.
  const auto cut = [&](bool lost) {
    if (incoming) {
      std::lock_guard<std::mutex> lock(incoming->mutex);
      incoming->cut = true;
      incoming->lost = lost;
      incoming->cv.notify_all();
    }
    if (out >= 0) {
      ::close(out);
      ::unlink(staging.c_str());
    }
  };
  std::string chunk;
  std::uint64_t received = 0;
  try {
    nlohmann::json early;  // the copy's end before all its bytes: a "cut" (its file went or changed)
    while (!entry.removed && received < entry.size) {
      if (!link.receive_chunk(chunk, static_cast<std::size_t>(std::min<std::uint64_t>(entry.size - received, 64u << 20)),
                              settings_.timeout, &early)) {
        break;
      }
      if (out >= 0) {
        std::size_t done = 0;
        while (done < chunk.size()) {
          const ssize_t n = ::write(out, chunk.data() + done, chunk.size() - done);
          if (n < 0) {
            if (errno == EINTR) continue;
            const int error = errno;
            ::close(out);
            ::unlink(staging.c_str());
            out = -1;
            say_(receive_failure(settings_.folder, path, entry.size, error, incoming ? received + done : 0));
            break;
          }
          done += static_cast<std::size_t>(n);
        }
      }
      received += chunk.size();
      if (incoming && out >= 0) {
        std::lock_guard<std::mutex> lock(incoming->mutex);
        incoming->written = received;
        incoming->cv.notify_all();
      }
    }
    const nlohmann::json end = early.is_null() ? link.receive(settings_.timeout) : early;
    if (end.value("type", "") != "end" || received < entry.size) {
      // Given up upstream: by its sender (its file changed: a newer commit follows, or none is
      // due), or by a node before this one that lost its own link ("lost"): then the version
      // stays announced, for the restore to name.
      const bool lost = end.value("lost", false);
      cut(lost);
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = announced_.find(path); !lost && it != announced_.end() && it->second == entry.version) {
        announced_.erase(it);
      }
      changed();
      return false;
    }
  } catch (...) {
    cut(true);  // the announced version stays: a copy cut by its sender's loss
    std::lock_guard<std::mutex> lock(mutex_);
    changed();
    throw;
  }
  if (wanted && !entry.removed && out < 0) {
    // Not written here (said). The version stays announced: if its sender goes before a restore
    // brings it here, the restore names it lost rather than leave a folder silently without it.
    cut(false);
    return false;
  }
  // Whole: in place, when still newer than what is held.
  bool placed = false;
  struct stat st {};
  if (out >= 0) ::fstat(out, &st);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot >= 0) {
      Manifest& held = held_.try_emplace(slot, Manifest("")).first->second;
      const std::string full = held_path(slot, path);
      std::error_code error;
      if (wanted && held.receive(path, entry)) {
        if (entry.removed) {
          ::unlink(full.c_str());
          placed = true;
        } else if (std::filesystem::create_directories(std::filesystem::path(full).parent_path(), error),
                   ::rename(staging.c_str(), full.c_str()) == 0) {
          placed = true;
        } else {
          held.forget(path);
          say_(fmt::format("snapshots: cannot hold the copy of {}: {}", path, std::strerror(errno)));
        }
      }
    } else if (auto it = announced_.find(path); it != announced_.end() && !(entry.version < it->second)) {
      announced_.erase(it);
    }
    if (slot < 0 && wanted && manifest_.receive(path, entry)) {
      const std::string full = settings_.folder + "/" + path;
      if (entry.removed) {
        if (::unlink(full.c_str()) == 0) ++unlinking_[path];
        placed = true;
      } else if (make_parents(settings_.folder, path) && ::rename(staging.c_str(), full.c_str()) == 0) {
        placed_[path] = static_cast<unsigned long>(st.st_ino);
        placed = true;
      } else {
        say_(fmt::format("snapshots: cannot put the copy of {} in place: {}", path, std::strerror(errno)));
      }
    }
    changed();
  }
  if (out >= 0) {
    ::close(out);
    if (!placed) ::unlink(staging.c_str());
  }
  if (incoming) {
    std::lock_guard<std::mutex> lock(incoming->mutex);
    incoming->ended = true;
    incoming->cv.notify_all();
  }
  if (bytes != nullptr) *bytes += received;
  return placed;
}

void Replicator::send_file(ReplicaLink& link, const std::string& path, const ManifestEntry& entry, const OutItem* item) {
  nlohmann::json header = {{"type", "copy"}, {"path", path}, {"entry", entry}};
  if (item != nullptr && item->hops > 0) {
    header["slot"] = item->slot;
    header["hops"] = item->hops;
  }
  link.send(header);
  if (entry.removed) {
    link.send({{"type", "end"}});
    return;
  }
  std::string full = settings_.folder + "/" + path;
  if (item != nullptr && item->held) {
    std::lock_guard<std::mutex> lock(mutex_);
    full = held_path(item->slot, path);
  }
  const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat before {};
  if (fd < 0 || ::fstat(fd, &before) != 0 || static_cast<std::uint64_t>(before.st_size) != entry.size) {
    if (fd >= 0) ::close(fd);
    link.send({{"type", "cut"}});  // changed or gone since its commit: its next commit follows
    return;
  }
  std::string chunk(settings_.chunk, '\0');
  std::uint64_t sent = 0;
  bool ok = true;
  while (sent < entry.size) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(entry.size - sent, chunk.size()));
    const ssize_t n = ::pread(fd, chunk.data(), want, static_cast<off_t>(sent));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      ok = false;
      break;
    }
    link.send_chunk(std::string_view(chunk.data(), static_cast<std::size_t>(n)));
    sent += static_cast<std::uint64_t>(n);
  }
  struct stat after {};
  ok = ok && ::fstat(fd, &after) == 0 && after.st_size == before.st_size &&
       after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec;
  ::close(fd);
  if (!ok && sent < entry.size) throw LinkError(fmt::format("{} shrank while being sent", path));
  link.send({{"type", ok ? "end" : "cut"}});
}

void Replicator::send_item(ReplicaLink& link, const OutItem& item) {
  const std::string next = peer_address(link.fd());  // before a reset, which forgets it
  // A copy being received: forwarded as its bytes land.
  const auto forward = [&] {
    Incoming& in = *item.source;
    nlohmann::json header = {{"type", "copy"}, {"path", item.path}, {"entry", item.entry}};
    if (item.hops > 0) {
      header["slot"] = item.slot;
      header["hops"] = item.hops;
    }
    link.send(header);
    std::string chunk(settings_.chunk, '\0');
    std::uint64_t sent = 0;
    for (;;) {
      std::uint64_t available = 0;
      bool ended = false;
      bool cut = false;
      bool lost = false;
      {
        std::unique_lock<std::mutex> lock(in.mutex);
        in.cv.wait(lock, [&] { return in.written > sent || in.ended || in.cut; });
        available = in.written;
        ended = in.ended;
        cut = in.cut;
        lost = in.lost;
      }
      if (cut) {
        link.send({{"type", "cut"}, {"lost", lost}});
        return;
      }
      while (sent < available) {
        const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(available - sent, chunk.size()));
        const ssize_t n = ::pread(in.fd, chunk.data(), want, static_cast<off_t>(sent));
        if (n <= 0) throw LinkError(fmt::format("cannot read the copy of {} being received", item.path));
        link.send_chunk(std::string_view(chunk.data(), static_cast<std::size_t>(n)));
        sent += static_cast<std::uint64_t>(n);
      }
      if (ended && sent >= in.size) {
        link.send({{"type", "end"}});
        return;
      }
    }
  };
  try {
    if (!item.source) {
      send_file(link, item.path, item.entry, &item);
    } else {
      forward();
    }
  } catch (const LinkError& e) {
    // The next node went (or its link broke) in the middle of the copy: said once here; the
    // queue tries again (send_loop), and a copy the next node began is named at the next restore.
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping = stopping_;
    }
    if (!stopping) {
      say_(fmt::format("snapshots: the copy of {} ({}) to the next node of the ring, {}, was cut: {}; sent again "
                       "once a next node takes it (the next round's, if that node was lost)",
                       item.path, size_words(item.entry.size), next, e.what()));
    }
    throw;
  }
}

}  // namespace ddprun::elastic
