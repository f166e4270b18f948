#include "process/orphan_guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>

#include "process/containment.hpp"

namespace ddprun::launcher {
namespace {

struct Message {
  char op;  // '+' watch, '-' forget
  pid_t process_group;
};

[[noreturn]] void run_guard(int from_launcher, const std::string& cgroup, const std::string& private_folder,
                            const std::function<void()>& chores) {
  ::setpgid(0, 0);  // out of ddprun's group: a Ctrl-C or killpg aimed at ddprun misses it
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
  Message m;
  for (;;) {
    const ssize_t n = ::read(from_launcher, &m, sizeof m);
    if (n == sizeof m) {
      if (m.op == '+') groups.insert(m.process_group);
      else groups.erase(m.process_group);
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

void OrphanGuard::send(char op, pid_t process_group) {
  if (!to_guard_) return;
  const Message m{op, process_group};
  // Messages are far below PIPE_BUF, so each write is atomic and never partial.
  while (::write(to_guard_.get(), &m, sizeof m) < 0 && errno == EINTR) {
  }
}

}  // namespace ddprun::launcher
