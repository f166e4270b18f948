// Starting one worker process.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "process/unique_fd.hpp"

namespace ddprun::launcher {

struct SpawnRequest {
  std::vector<std::string> argv;      // argv[0] is looked up in PATH unless it has a '/'
  std::vector<std::string> environ;   // the whole environment, "NAME=value"
  int stdout_fd = -1;                 // -1: inherit ddprun's
  int stderr_fd = -1;
  bool own_process_group = true;      // false only in --debug, to keep the terminal
  int cgroup_dir_fd = -1;             // a cgroup's folder: the child is made there (clone3) ...
  int cgroup_procs_fd = -1;           // ... or, where clone3 cannot, moves itself in through its cgroup.procs
};

struct SpawnResult {
  pid_t pid = -1;     // > 0 once the program is running
  int error = 0;      // errno from execve (or fork) when it could not start
};

// Forks and execs. The child gets the default signal dispositions and an empty signal mask,
// leads its own process group (unless told otherwise), and is sent SIGKILL if ddprun dies.
// Returns only after the exec succeeded or failed, so "could not start" (error != 0, child
// already reaped) is told apart from "started and failed".
SpawnResult spawn_process(const SpawnRequest& request);

// Where execvp would find `program` ("" if nowhere), and why not if not found.
struct ProgramLookup {
  std::string path;
  int error = 0;  // ENOENT, EACCES, ...
};
ProgramLookup find_program(const std::string& program, const std::string& search_path);
// The folders programs are looked up in: `environ`'s PATH, or a default when it has none.
std::string search_path(const std::map<std::string, std::string>& environ);

}  // namespace ddprun::launcher
