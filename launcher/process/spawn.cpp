#include "process/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <system_error>

namespace ddprun::launcher {

Pipe Pipe::create() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

namespace {

// The soft RLIMIT_NOFILE ddprun was started with, when raise_file_limit() raised it.
struct rlimit inherited_files {};
bool files_raised = false;

// Runs in the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const SpawnRequest& request, char* const* argv, char* const* envp,
                             pid_t parent, int status_fd) {
  const auto fail = [status_fd](int error) {
    ssize_t ignored = ::write(status_fd, &error, sizeof error);
    (void)ignored;
    ::_exit(127);
  };
  // Into the job's cgroup before anything else: whatever the program forks from here on stays there.
  if (request.cgroup_procs_fd >= 0 && ::write(request.cgroup_procs_fd, "0", 1) != 1) fail(errno);
  if (request.own_process_group && ::setpgid(0, 0) != 0) fail(errno);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  // ddprun may have died between fork and prctl; then nobody would send the signal.
  if (::getppid() != parent) ::_exit(128 + SIGKILL);
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);  // ignored SIGPIPE would be inherited
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (request.stdout_fd >= 0 && ::dup2(request.stdout_fd, STDOUT_FILENO) < 0) fail(errno);
  if (request.stderr_fd >= 0 && ::dup2(request.stderr_fd, STDERR_FILENO) < 0) fail(errno);
  if (files_raised && ::setrlimit(RLIMIT_NOFILE, &inherited_files) != 0) fail(errno);
  ::execvpe(argv[0], argv, envp);
  fail(errno);
  ::_exit(127);
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

SpawnResult spawn_process(const SpawnRequest& request) {
  // Everything the child touches is prepared before fork: it must not allocate.
  auto argv = c_strings(request.argv);
  auto envp = c_strings(request.environ);
  Pipe status = Pipe::create();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return SpawnResult{-1, errno};
  if (pid == 0) exec_child(request, argv.data(), envp.data(), parent, status.write_end.get());
  if (request.own_process_group) ::setpgid(pid, pid);  // also here, so killpg works at once
  status.write_end.reset();
  int error = 0;
  ssize_t n;
  do {
    n = ::read(status.read_end.get(), &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof error) {
    int ignored;
    while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    return SpawnResult{-1, error};
  }
  return SpawnResult{pid, 0};
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
