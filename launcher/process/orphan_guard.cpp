#include "process/orphan_guard.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <type_traits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

#include "process/containment.hpp"

namespace ddprun::launcher {
namespace {

struct Message {
  char op;  // '+' watch, '-' forget, 'F' fence at `deadline` (0: none)
  pid_t process_group;
  std::int64_t deadline;  // nanoseconds of CLOCK_MONOTONIC
};

std::int64_t monotonic_now() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// Until the fence's deadline (rounded up to a millisecond), or forever without one.
int wait_ms(std::int64_t deadline) {
  if (deadline == 0) return -1;
  const std::int64_t left = deadline - monotonic_now();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>((left + 999'999) / 1'000'000, 1 << 30));
}

// Names the guard in ps and /proc/PID/cmdline as "ddprun: orphan guard of PID": a fork shows
// ddprun's command line, with the training script's name in it, so `pgrep -f train.py` would
// list the guard and `pkill -KILL -f train.py` would kill it with ddprun, leaving the cgroup
// behind. The arguments' memory, whose bounds the kernel gives in /proc/self/stat, is
// overwritten in place, as setproctitle does; it is the guard's own copy since the fork.
void rename_process() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return;
  const auto close = line.rfind(')');  // the name, in parentheses, may hold spaces
  if (close == std::string::npos) return;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  unsigned long long arg_start = 0, arg_end = 0;
  for (int index = 3; fields >> field && index <= 49; ++index) {  // state is field 3
    if (index == 48) arg_start = std::strtoull(field.c_str(), nullptr, 10);
    if (index == 49) arg_end = std::strtoull(field.c_str(), nullptr, 10);
  }
  if (arg_start == 0 || arg_end <= arg_start) return;
  const std::string title = "ddprun: orphan guard of " + std::to_string(::getppid());
  char* const args = reinterpret_cast<char*>(arg_start);
  const std::size_t size = arg_end - arg_start;
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
  std::set<pid_t> groups;
  std::int64_t fence = 0;
  Message m;
  for (;;) {
    pollfd ready{from_launcher, POLLIN, 0};
    const int polled = ::poll(&ready, 1, wait_ms(fence));
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) {  // the fence's deadline passed and ddprun did not move it: fence for it
      for (pid_t group : groups) ::kill(-group, SIGKILL);
      fence = 0;
      continue;
    }
    const ssize_t n = ::read(from_launcher, &m, sizeof m);
    if (n == sizeof m) {
      if (m.op == '+') groups.insert(m.process_group);
      else if (m.op == '-') groups.erase(m.process_group);
      else if (m.op == 'F') fence = m.deadline;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF: ddprun is gone
  }
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  if (!cgroup.empty()) Containment::remove_cgroup(cgroup);
  if (!private_folder.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(private_folder, ignored);
  }
  ::_exit(0);
}

}  // namespace

OrphanGuard OrphanGuard::start(const std::string& cgroup, const std::string& private_folder,
                               const std::function<void()>& chores) {
  Pipe pipe = Pipe::create();
  UniqueFd inotify(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));  // inherited by the guard
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork (orphan guard)");
  if (pid == 0) {
    pipe.write_end.reset();
    run_guard(pipe.read_end.get(), cgroup, private_folder, chores);
  }
  return OrphanGuard(std::move(pipe.write_end), pid, std::move(inotify));
}

void OrphanGuard::watch(pid_t process_group) { send('+', process_group); }
void OrphanGuard::forget(pid_t process_group) { send('-', process_group); }

void OrphanGuard::fence_at(std::optional<std::chrono::steady_clock::time_point> deadline) {
  static_assert(std::is_same_v<std::chrono::steady_clock::duration, std::chrono::nanoseconds>);
  // steady_clock is CLOCK_MONOTONIC (libstdc++ and libc++ on Linux); 0 means none, so a
  // deadline at 0 ns (never a real one) becomes 1.
  send('F', 0, deadline ? std::max<std::int64_t>(1, deadline->time_since_epoch().count()) : 0);
}

void OrphanGuard::send(char op, pid_t process_group, std::int64_t deadline) {
  if (!to_guard_) return;
  const Message m{op, process_group, deadline};
  // Messages are far below PIPE_BUF, so each write is atomic and never partial.
  while (::write(to_guard_.get(), &m, sizeof m) < 0 && errno == EINTR) {
  }
}

}  // namespace ddprun::launcher
