// Reading an inotify descriptor: every event queued on it, in order. The heartbeat files
// (launcher/hangs/) and the snapshot folder's commit watch (launcher/snapshots/) read theirs so.
#pragma once

#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace ddprun {

// Calls `on_event(const inotify_event&)` for every event queued on the non-blocking inotify
// descriptor `fd`, until none is left (EAGAIN) or the read fails; a read cut by a signal is
// retried. An event's name (event.len > 0) is valid only during the call.
template <class OnEvent>
void read_inotify_events(int fd, OnEvent&& on_event) {
  // Room for many events: one read takes what a burst of writes queued.
  alignas(inotify_event) std::array<char, 16384> buffer;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    for (ssize_t at = 0; at < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer.data() + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      on_event(*event);
    }
  }
}

}  // namespace ddprun
