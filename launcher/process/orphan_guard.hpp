// Keeps workers and their children from outliving ddprun, however ddprun ends.
//
// A worker gets PR_SET_PDEATHSIG, but its own children do not, and a SIGKILLed ddprun cannot
// clean up. So ddprun forks this small guard first thing: it learns every worker's process
// group through a socket and, when it closes (ddprun exited or was killed), sends SIGKILL
// to the groups still registered, kills ddprun's cgroup (containment.hpp) if it has one, and
// removes ddprun's private folder if ddprun could not. It ignores terminal and job-control
// signals; it ends with ddprun.
//
// It also holds ddprun's connection to the rendezvous (hold_connection()), so that a killed ddprun's
// connection ends only after its workers are dead. And it is the backstop of the rendezvous's fence (elastic/src/core/fence.hpp): a ddprun that
// is stopped (SIGSTOP) or stalled cannot run its own fence timer, so the guard kills the watched
// groups itself at a deadline ddprun keeps moving (fence_at()), a little after ddprun's own.
//
// It also holds what would make ddprun's own exit slow to close: the heartbeat files' and the
// snapshot folder's inotify instances (take_inotify(), take_snapshot_inotify()).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

class OrphanGuard {
 public:
  // Forks the guard. Call before any other thread or worker exists. `cgroup` and
  // `private_folder` ("" for none) are cleaned up when ddprun is gone. The guard first runs
  // `chores` (if any): work ddprun's start need not wait for, such as removing what dead ddprun
  // processes left behind. `not_held`: descriptors of ddprun's that the guard closes at once, so
  // that what they hold ends with ddprun, not with the guard (the snapshot folder's flock: a rerun
  // that starts while the last run's guard cleans up must find it released).
  static OrphanGuard start(const std::string& cgroup, const std::string& private_folder,
                           const std::function<void()>& chores = nullptr, const std::vector<int>& not_held = {});
  OrphanGuard() = default;

  // A worker's process group to kill if ddprun dies.
  void watch(pid_t process_group);
  // The same, from a child of ddprun between its fork and its exec, through the guard's socket
  // (socket(), StartRequest::guard_fd), which the child holds until its exec: the guard sees
  // ddprun's end only once every such copy is closed, so a worker whose ddprun is SIGKILLed
  // before it called watch() is known to the guard, and waited for, all the same.
  // Async-signal-safe. forget_from_child() takes it back when the exec failed.
  static void watch_from_child(int guard_socket, pid_t process_group);
  static void forget_from_child(int guard_socket, pid_t process_group);
  int socket() const { return to_guard_.get(); }
  // The group has been cleaned up; its id may be reused.
  void forget(pid_t process_group);
  // SIGKILL to every watched group at `deadline` (CLOCK_MONOTONIC, steady_clock's), unless it is
  // moved first; nullopt: no deadline. The groups stay watched.
  void fence_at(std::optional<std::chrono::steady_clock::time_point> deadline);
  // The guard holds a copy of this node's connection to its coordinator (its descriptor `fd` in
  // ddprun, which names it) until drop_connection(fd), or until ddprun is gone and the guard has
  // killed the watched groups: the kernel's close of ddprun's descriptors, when ddprun is killed,
  // then does not end the connection, and the coordinator, which counts the node lost at the
  // connection's end, never sees it before the workers are dead.
  void hold_connection(int fd);
  // Call after ddprun closed its own copy: the connection then ends.
  void drop_connection(int fd);
  pid_t pid() const { return pid_; }

  // An inotify instance made before the guard's fork, so that the guard holds it too (invalid
  // where none could be made; once only). The last close of an instance that had watches waits
  // for the kernel to reap them (an SRCU grace period: 5 to 23 ms each time on the loaded 2-core
  // VM); ddprun's close then only drops a reference, and the guard, which exits after ddprun,
  // does the wait.
  UniqueFd take_inotify() { return std::move(inotify_); }
  // Another, for the snapshot folder's watch (snapshots/commit_watch.hpp).
  UniqueFd take_snapshot_inotify() { return std::move(snapshot_inotify_); }

 private:
  OrphanGuard(UniqueFd to_guard, pid_t pid, UniqueFd inotify, UniqueFd snapshot_inotify)
      : to_guard_(std::move(to_guard)),
        pid_(pid),
        inotify_(std::move(inotify)),
        snapshot_inotify_(std::move(snapshot_inotify)) {}
  void send(char op, pid_t process_group, std::int64_t deadline = 0, int id = 0, int fd = -1);
  UniqueFd to_guard_;
  pid_t pid_ = -1;
  UniqueFd inotify_;
  UniqueFd snapshot_inotify_;
};

}  // namespace ddprun::launcher
