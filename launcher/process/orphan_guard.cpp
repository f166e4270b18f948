#include "process/orphan_guard.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "process/clone_vfork.hpp"
#include "ddprun/clocks.hpp"
#include "process/containment.hpp"
#include "process/process_tree.hpp"

namespace ddprun::launcher {
namespace {

struct Message {
  char op;  // '+' watch, '-' forget, 'F' fence at `deadline` (0: none), 'H' hold the descriptor
            // attached (`id`), 'D' drop the one held as `id`
  pid_t process_group;
  std::int64_t deadline;  // nanoseconds of CLOCK_MONOTONIC
  int id;
};

// Whether a process of one of `groups` is still alive: neither gone nor a zombie (a zombie runs no
// code). Read from /proc, since the guard is no parent of the workers.
bool any_alive(const std::set<pid_t>& groups) {
  if (groups.empty()) return false;
  for (const ProcStat& p : all_proc_stats()) {
    if (p.state != 'Z' && p.state != 'X' && groups.count(p.process_group)) return true;
  }
  return false;
}

// The process groups of `parent`'s children, but `parent`'s own: at the fence, ddprun (stopped or
// stalled) may have forked a worker and not yet told the guard of its group.
std::set<pid_t> children_groups(pid_t parent) {
  std::set<pid_t> groups;
  const pid_t own = ::getpgid(parent);
  for (const ProcStat& p : all_proc_stats()) {
    if (p.parent == parent && p.process_group != own && p.process_group != ::getpgrp() && p.process_group > 0) {
      groups.insert(p.process_group);  // not ddprun's group, nor the guard's own
    }
  }
  return groups;
}

// One message from ddprun, and the descriptor it carries ('H'); 0 at EOF, -1 on an error.
ssize_t receive(int from_launcher, Message& m, int& fd) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec data{&m, sizeof m};
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  header.msg_control = control;
  header.msg_controllen = sizeof control;
  fd = -1;
  const ssize_t n = ::recvmsg(from_launcher, &header, MSG_CMSG_CLOEXEC);
  for (cmsghdr* c = CMSG_FIRSTHDR(&header); n > 0 && c; c = CMSG_NXTHDR(&header, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  }
  return n;
}

// Sends `m`, with descriptor `fd` attached unless -1. Async-signal-safe (a worker's child side
// calls it between fork and exec). A sequenced packet: each message arrives whole, in order, or
// not at all (the guard is gone).
DDPRUN_CHILD_STACK void send_message(int to_guard, Message m, int fd) {
  iovec data{&m, sizeof m};
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    header.msg_control = control;
    header.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&header);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  while (::sendmsg(to_guard, &header, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// Until the fence's deadline (rounded up to a millisecond), or forever without one.
int wait_ms(std::int64_t deadline) {
  if (deadline == 0) return -1;
  const std::int64_t left = deadline - monotonic_ns();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>((left + 999'999) / 1'000'000, 1 << 30));
}

// Names the guard in ps and /proc/PID/cmdline as "ddprun: orphan guard of PID": a fork shows
// ddprun's command line, with the training script's name in it, so `pgrep -f train.py` would
// list the guard and `pkill -KILL -f train.py` would kill it with ddprun, leaving the cgroup
// behind. The arguments' memory, whose bounds the kernel gives in /proc/self/stat, is
// overwritten in place, as setproctitle does; it is the guard's own copy since the fork.
void rename_process() {
  const auto self = proc_stat(::getpid());
  if (!self || self->arg_start == 0 || self->arg_end <= self->arg_start) return;
  const std::string title = "ddprun: orphan guard of " + std::to_string(::getppid());
  char* const args = reinterpret_cast<char*>(self->arg_start);
  const std::size_t size = self->arg_end - self->arg_start;
  std::memset(args, 0, size);  // the last byte stays '\0', so the kernel reads no further
  std::memcpy(args, title.data(), std::min(title.size(), size - 1));
  ::prctl(PR_SET_NAME, "ddprun-guard");
}

[[noreturn]] void run_guard(int from_launcher, const std::string& cgroup, const std::string& private_folder,
                            const std::function<void()>& chores) {
  ::setpgid(0, 0);  // out of ddprun's group: a Ctrl-C or killpg aimed at ddprun misses it
  rename_process();
  // Hold no copy of ddprun's stdout/stderr: whoever reads them sees EOF when ddprun exits.
  if (int null = ::open("/dev/null", O_RDWR); null >= 0) {
    for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) ::dup2(null, fd);
    if (null > STDERR_FILENO) ::close(null);
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU})
    ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Before the first read: ddprun's messages wait in the pipe meanwhile.
  if (chores) chores();
  const pid_t launcher = ::getppid();  // ddprun, while it lives
  std::set<pid_t> groups;
  std::map<int, int> held;  // ddprun's id -> the guard's copy of that connection
  std::int64_t fence = 0;
  Message m;
  for (;;) {
    pollfd ready{from_launcher, POLLIN, 0};
    const int polled = ::poll(&ready, 1, wait_ms(fence));
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) {  // the fence's deadline passed and ddprun did not move it: fence for it
      for (pid_t group : groups) ::kill(-group, SIGKILL);
      for (pid_t group : children_groups(launcher)) ::kill(-group, SIGKILL);
      fence = 0;
      continue;
    }
    int fd = -1;
    const ssize_t n = receive(from_launcher, m, fd);
    if (n == sizeof m) {
      if (m.op == '+') groups.insert(m.process_group);
      else if (m.op == '-') groups.erase(m.process_group);
      else if (m.op == 'F') fence = m.deadline;
      else if (m.op == 'H' && fd >= 0 && held.count(m.id) == 0) held.emplace(m.id, std::exchange(fd, -1));
      else if (auto it = held.find(m.id); m.op == 'D' && it != held.end()) fd = it->second, held.erase(it);
      if (fd >= 0) ::close(fd);  // dropped, replaced, or not asked for
      continue;
    }
    if (fd >= 0) ::close(fd);
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF: ddprun is gone
  }
  // The workers first, the connections after: the coordinator hears that this node is gone (its
  // connection's end) only once its workers are, dead or zombies (a SIGKILL is delivered when its
  // target next runs). A process that takes longer than kDeathWait to go (one in uninterruptible
  // sleep, on a hung file system) does not keep the connection open for ever.
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  if (!held.empty()) {
    constexpr auto kDeathWait = std::chrono::seconds(10);
    const auto until = std::chrono::steady_clock::now() + kDeathWait;
    while (any_alive(groups) && std::chrono::steady_clock::now() < until) ::usleep(1000);
  }
  // With a cgroup ddprun told the guard no group: killing and removing the cgroup waits for
  // every process in it to be gone (a few seconds at most, remove_cgroup()), before the
  // connections end too.
  if (!cgroup.empty()) Containment::remove_cgroup(cgroup);
  for (const auto& [id, fd] : held) ::close(fd);
  if (!private_folder.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(private_folder, ignored);
  }
  ::_exit(0);
}

}  // namespace

OrphanGuard OrphanGuard::start(const std::string& cgroup, const std::string& private_folder,
                               const std::function<void()>& chores, const std::vector<int>& not_held) {
  // A socket, not a pipe: it carries descriptors (hold_connection), and keeps each message whole.
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
    throw std::system_error(errno, std::generic_category(), "socketpair (orphan guard)");
  }
  UniqueFd launcher_end(ends[0]), guard_end(ends[1]);
  UniqueFd inotify(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));  // inherited by the guard
  UniqueFd snapshot_inotify(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork (orphan guard)");
  if (pid == 0) {
    launcher_end.reset();
    for (int fd : not_held) ::close(fd);
    run_guard(guard_end.get(), cgroup, private_folder, chores);
  }
  return OrphanGuard(std::move(launcher_end), pid, std::move(inotify), std::move(snapshot_inotify));
}

void OrphanGuard::watch(pid_t process_group) { send('+', process_group); }
void OrphanGuard::forget(pid_t process_group) { send('-', process_group); }

void OrphanGuard::fence_at(std::optional<std::chrono::steady_clock::time_point> deadline) {
  send('F', 0, deadline_ns(deadline));
}

void OrphanGuard::hold_connection(int fd) { send('H', 0, 0, fd, fd); }
void OrphanGuard::drop_connection(int fd) { send('D', 0, 0, fd); }

DDPRUN_CHILD_STACK void OrphanGuard::watch_from_child(int guard_socket, pid_t process_group) {
  send_message(guard_socket, Message{'+', process_group, 0, 0}, -1);
}
DDPRUN_CHILD_STACK void OrphanGuard::forget_from_child(int guard_socket, pid_t process_group) {
  send_message(guard_socket, Message{'-', process_group, 0, 0}, -1);
}

void OrphanGuard::send(char op, pid_t process_group, std::int64_t deadline, int id, int fd) {
  if (to_guard_) send_message(to_guard_.get(), Message{op, process_group, deadline, id}, fd);
}

}  // namespace ddprun::launcher
