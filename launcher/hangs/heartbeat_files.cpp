#include "hangs/heartbeat_files.hpp"

#include "ddprun/inotify.hpp"

#include <fcntl.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ddprun::launcher {

HeartbeatFiles::HeartbeatFiles(asio::io_context& io, UniqueFd instance, std::function<void(int)> beat)
    : inotify_(io), beat_(std::move(beat)) {
  if (!instance) instance.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!instance) throw std::system_error(errno, std::generic_category(), "inotify_init1");
  inotify_.assign(instance.release());
  wait();
}

HeartbeatFiles::~HeartbeatFiles() {
  std::error_code ignored;
  inotify_.close(ignored);
}

void HeartbeatFiles::watch(int local_rank, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + path);
  ::close(fd);
  // IN_ATTRIB: a new modification time (touch, utimensat); IN_MODIFY: a write.
  const int wd = ::inotify_add_watch(inotify_.native_handle(), path.c_str(), IN_ATTRIB | IN_MODIFY);
  if (wd < 0) throw std::system_error(errno, std::generic_category(), "inotify_add_watch " + path);
  rank_of_watch_[wd] = local_rank;
}

void HeartbeatFiles::clear() {
  for (const auto& [wd, rank] : rank_of_watch_) ::inotify_rm_watch(inotify_.native_handle(), wd);
  rank_of_watch_.clear();
}

void HeartbeatFiles::wait() {
  inotify_.async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
    if (ec || !inotify_.is_open()) return;
    read_inotify_events(inotify_.native_handle(), [this](const inotify_event& event) {
      const auto it = rank_of_watch_.find(event.wd);
      // Events of a removed watch (IN_IGNORED) and of an earlier round are not beats.
      if (it != rank_of_watch_.end() && (event.mask & (IN_ATTRIB | IN_MODIFY))) beat_(it->second);
    });
    wait();
  });
}

}  // namespace ddprun::launcher
