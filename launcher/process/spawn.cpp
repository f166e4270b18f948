#include "process/spawn.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <system_error>

#include "ddprun/clocks.hpp"
#include "ddprun/unique_fd.hpp"
#include "process/clone_vfork.hpp"
#include "process/orphan_guard.hpp"

namespace ddprun::launcher {

namespace {

// The soft RLIMIT_NOFILE ddprun was started with, when raise_file_limit() raised it.
struct rlimit inherited_files {};
bool files_raised = false;

// What the child needs between its birth and exec, all made before: it must not allocate.
struct ChildSetup {
  const StartRequest* request;
  char* const* argv;
  char* const* envp;
  pid_t parent;
  int status_fd;   // the status pipe's write end, closed by the exec
  bool in_cgroup;  // made in the cgroup (clone3), else it moves itself in
  std::int64_t start_by;  // request.start_by in nanoseconds of CLOCK_MONOTONIC; 0: none
  bool vforked = false;  // by clone_vfork: it has exec'd (or died) when start_child returns
};

// The child could not become the program: errno to ddprun through the status pipe.
[[noreturn]] DDPRUN_CHILD_STACK void child_failed(int status_fd, int error) {
  ssize_t ignored = ::write(status_fd, &error, sizeof error);
  (void)ignored;
  ::_exit(127);
}

// Runs in the child between its birth and exec: only async-signal-safe calls, and nothing
// that writes ddprun's memory, which a child of clone_vfork shares until it execs.
[[noreturn]] DDPRUN_CHILD_STACK void exec_child(const ChildSetup& setup) {
  const StartRequest& request = *setup.request;
  const int status_fd = setup.status_fd;
  const auto fail = [status_fd](int error) { child_failed(status_fd, error); };
  if (setup.in_cgroup) {
    // "Running": a child made by clone3 that was killed at birth never says it (spawn_process).
    const int running = 0;
    ssize_t ignored = ::write(status_fd, &running, sizeof running);
    (void)ignored;
  } else if (request.cgroup_procs_fd >= 0 && ::write(request.cgroup_procs_fd, "0", 1) != 1) {
    // Into the job's cgroup before anything else: whatever the program forks from here on
    // stays there.
    fail(errno);
  }
  if (request.own_process_group && ::setpgid(0, 0) != 0) fail(errno);
  if (request.cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), request.cpus) != 0) fail(errno);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  // ddprun may have died between fork and prctl; then nobody would send the signal.
  if (::getppid() != setup.parent) ::_exit(128 + SIGKILL);
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);  // ignored SIGPIPE would be inherited
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (request.stdout_fd >= 0 && ::dup2(request.stdout_fd, STDOUT_FILENO) < 0) fail(errno);
  if (request.stderr_fd >= 0 && ::dup2(request.stderr_fd, STDERR_FILENO) < 0) fail(errno);
  if (files_raised && ::setrlimit(RLIMIT_NOFILE, &inherited_files) != 0) fail(errno);
  const pid_t own_group = ::getpid();
  if (request.guard_fd >= 0) OrphanGuard::watch_from_child(request.guard_fd, own_group);
  // Last: ddprun checked the fence's deadline before the fork, but may have been stopped since.
  if (setup.start_by != 0 && monotonic_ns() >= setup.start_by) {
    if (request.guard_fd >= 0) OrphanGuard::forget_from_child(request.guard_fd, own_group);
    fail(SpawnResult::kPastDeadline);
  }
  ::execvpe(setup.argv[0], setup.argv, setup.envp);
  const int error = errno;
  if (request.guard_fd >= 0) OrphanGuard::forget_from_child(request.guard_fd, own_group);
  fail(error);
  ::_exit(127);
}

DDPRUN_CHILD_STACK int run_child(void* setup) { exec_child(*static_cast<const ChildSetup*>(setup)); }

// A fork whose child starts in the cgroup of `cgroup_dir_fd` (clone3's CLONE_INTO_CGROUP,
// Linux 5.7). Moving a running child in by writing cgroup.procs is a migration, which waits for
// an RCU grace period under the cgroups' global lock: 5 to 15 ms per worker, one after the
// other, measured on Linux 6.18; a process made in its cgroup is not migrated at all. -1 with
// errno when the kernel (or a seccomp filter, as Docker's default one) refuses clone3.
pid_t fork_into_cgroup(int cgroup_dir_fd) {
#if defined(SYS_clone3) && defined(CLONE_INTO_CGROUP)
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<__u64>(cgroup_dir_fd);
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
#else
  (void)cgroup_dir_fd;
  errno = ENOSYS;
  return -1;
#endif
}

// Set once clone3 into a cgroup made a child that was killed at birth: some kernels (6.18
// among them) kill such a child whenever the target cgroup has been killed (cgroup.kill) a
// different number of times than ddprun's own cgroup, which for ddprun's own cgroup does not
// change while it runs.
std::atomic<bool> clone3_kills{false};

// A new process that runs exec_child(setup): one that shares ddprun's memory until it execs
// (clone_vfork), made in the cgroup when setup.in_cgroup, else a fork. Clears
// setup.in_cgroup when no way of making it in the cgroup worked.
pid_t start_child(ChildSetup& setup, int cgroup_dir_fd) {
  if (setup.in_cgroup) {
    pid_t pid = clone_vfork(run_child, &setup, cgroup_dir_fd);
    setup.vforked = pid > 0;
    if (pid < 0) pid = fork_into_cgroup(cgroup_dir_fd);
    if (pid >= 0) return pid;
    setup.in_cgroup = false;
  }
  const pid_t pid = clone_vfork(run_child, &setup, -1);
  setup.vforked = pid > 0;
  return pid >= 0 ? pid : ::fork();
}

int read_status(int fd, int& value) {
  ssize_t n;
  do {
    n = ::read(fd, &value, sizeof value);
  } while (n < 0 && errno == EINTR);
  return static_cast<int>(n);
}

void reap(pid_t pid) {
  int ignored;
  while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
  }
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

void raise_file_limit() {
  struct rlimit files {};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  inherited_files = files;
  files.rlim_cur = files.rlim_max;
  files_raised = ::setrlimit(RLIMIT_NOFILE, &files) == 0;
}

SpawnResult spawn_process(const StartRequest& request) {
  // Everything the child touches is prepared before fork: it must not allocate.
  auto argv = c_strings(request.argv);
  auto envp = c_strings(request.environ);
  const pid_t parent = ::getpid();
  const std::int64_t start_by = deadline_ns(request.start_by);
  for (;;) {
    Pipe status = Pipe::create();
    // Any refusal of clone3 falls back to fork, and a child not made in the cgroup writes
    // its cgroup.procs, which reports its own error if the cgroup is unusable.
    ChildSetup setup{
        &request, argv.data(), envp.data(), parent, status.write_end.get(), request.cgroup_dir_fd >= 0 && !clone3_kills,
        start_by};
    const pid_t pid = start_child(setup, request.cgroup_dir_fd);
    if (pid < 0) return SpawnResult{-1, errno};
    if (pid == 0) exec_child(setup);  // a fork's child
    // A forked child may not have run yet: its group is made here too, so that killpg works at
    // once. (After its exec this would fail with EACCES.)
    if (request.own_process_group && !setup.vforked) ::setpgid(pid, pid);
    status.write_end.reset();
    int value = 0;
    if (setup.in_cgroup && read_status(status.read_end.get(), value) != sizeof value) {
      reap(pid);
      clone3_kills = true;
      continue;
    }
    if (read_status(status.read_end.get(), value) == sizeof value) {
      reap(pid);
      return SpawnResult{-1, value};
    }
    return SpawnResult{pid, 0};
  }
}

std::string search_path(const std::map<std::string, std::string>& environ) {
  const auto it = environ.find("PATH");
  return it != environ.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
}

ProgramLookup find_program(const std::string& program, const std::string& search_path) {
  const auto check = [](const std::string& path) -> int {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (::access(path.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (program.find('/') != std::string::npos) {
    const int error = check(program);
    return ProgramLookup{error == 0 ? program : "", error};
  }
  int first_error = ENOENT;
  std::stringstream dirs(search_path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    const int error = check(candidate);
    if (error == 0) return ProgramLookup{candidate, 0};
    if (error != ENOENT && error != ENOTDIR && first_error == ENOENT) first_error = error;
  }
  return ProgramLookup{"", first_error};
}

}  // namespace ddprun::launcher
