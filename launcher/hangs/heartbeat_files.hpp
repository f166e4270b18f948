// The workers' heartbeat files (DDPRUN_HEARTBEAT_FILE), watched with inotify: a worker that
// touches its file (utimensat, `touch`, os.utime) or writes to it has made progress. One event
// per beat, no polling of the disk.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <asio/posix/stream_descriptor.hpp>

#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

class HeartbeatFiles {
 public:
  // `beat(local_rank)` runs on the event loop for each beat. `instance`: the inotify instance to
  // use (OrphanGuard::take_inotify(), whose close is cheap); invalid: one is made here.
  HeartbeatFiles(asio::io_context& io, UniqueFd instance, std::function<void(int)> beat);
  ~HeartbeatFiles();
  HeartbeatFiles(const HeartbeatFiles&) = delete;
  HeartbeatFiles& operator=(const HeartbeatFiles&) = delete;

  // Creates (or empties) `path` and watches it for `local_rank`. Throws std::system_error.
  void watch(int local_rank, const std::string& path);
  // Stops watching every file (the end of a round); the files stay.
  void clear();

 private:
  void wait();

  asio::posix::stream_descriptor inotify_;
  std::function<void(int)> beat_;
  std::map<int, int> rank_of_watch_;  // inotify watch descriptor -> local rank
};

}  // namespace ddprun::launcher
