#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "process/clone_vfork.hpp"
#include "process/containment.hpp"

using namespace ddprun;

namespace {

// What a child of clone_vfork saw, written before it returned: the parent reads it only after
// clone_vfork returned, which it does once the child is gone (CLONE_VFORK).
struct Seen {
  pid_t pid = 0;
  int exit_status = 0;
  char cgroup[4096] = {};  // its /proc/self/cgroup
};

// System calls only, into memory prepared by the parent, as a child of clone_vfork must.
DDPRUN_CHILD_STACK int note_and_return(void* arg) {
  auto* seen = static_cast<Seen*>(arg);
  seen->pid = ::getpid();  // the shared memory: the parent sees this
  const int fd = ::open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t n = ::read(fd, seen->cgroup, sizeof seen->cgroup - 1);
    (void)n;
    ::close(fd);
  }
  return seen->exit_status;
}

DDPRUN_CHILD_STACK int exec_true(void*) {
  char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
  ::execv(argv[0], argv);
  return 127;
}

int exit_status_of(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A new cgroup below this process's own, where it may make one ("" if not: not root, no
// cgroup v2, or a read-only hierarchy): where ddprun would make its own.
std::string new_cgroup() {
  const std::string path = launcher::Containment::planned_path({});
  return !path.empty() && ::mkdir(path.c_str(), 0755) == 0 ? path : "";
}

}  // namespace

TEST_CASE("clone_vfork: the child runs on ddprun's memory, and the parent goes on once it is done") {
  Seen seen;
  seen.exit_status = 7;
  const pid_t pid = launcher::clone_vfork(note_and_return, &seen, -1);
  REQUIRE(pid > 0);
  CHECK(seen.pid == pid);  // written by the child, before clone_vfork returned
  CHECK(exit_status_of(pid) == 7);

  const pid_t exec_pid = launcher::clone_vfork(exec_true, nullptr, -1);
  REQUIRE(exec_pid > 0);
  CHECK(exit_status_of(exec_pid) == 0);
}

TEST_CASE("clone_vfork: into a cgroup, where this machine lets the test make one") {
  const std::string cgroup = new_cgroup();
  if (cgroup.empty()) {
    MESSAGE("skipped: no writable cgroup v2 here");
    return;
  }
  const int dir = ::open(cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dir >= 0);
  Seen seen;
  const pid_t pid = launcher::clone_vfork(note_and_return, &seen, dir);
  if (pid < 0 && errno == ENOSYS) {
    MESSAGE("skipped: no clone3 into a cgroup on this architecture");
  } else {
    REQUIRE(pid > 0);
    CHECK(seen.pid == pid);
    // The child was made in the cgroup.
    const std::string name = cgroup.substr(cgroup.rfind('/'));
    CHECK(std::string(seen.cgroup).find(name + "\n") != std::string::npos);
    CHECK(exit_status_of(pid) == 0);
  }
  ::close(dir);
  ::rmdir(cgroup.c_str());
}
