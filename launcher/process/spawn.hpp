// Starting one worker process.
#pragma once

#include <sched.h>

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

struct SpawnRequest {
  std::vector<std::string> argv;      // argv[0] is looked up in PATH unless it has a '/'
  std::vector<std::string> environ;   // the whole environment, "NAME=value"
  int stdout_fd = -1;                 // -1: inherit ddprun's
  int stderr_fd = -1;
  bool own_process_group = true;      // false only in --debug, to keep the terminal
  int cgroup_dir_fd = -1;             // a cgroup's folder: the child is made there (clone3) ...
  int cgroup_procs_fd = -1;           // ... or, where clone3 cannot, moves itself in through its cgroup.procs
  const cpu_set_t* cpus = nullptr;    // --numa_binding: the CPUs it runs on; nullptr: ddprun's
  int guard_fd = -1;                  // the orphan guard's socket: the child registers its group there
                                      // before its exec (OrphanGuard::watch_from_child); -1: not
  // The fence's deadline: the child does not exec at or after it (SpawnResult::kPastDeadline).
  // It looks at the clock last, once it leads its group and told the guard of it: a program that
  // runs was started before the deadline, so the guard's backstop, which fires after it, finds
  // its group (orphan_guard.hpp). nullopt: none.
  std::optional<std::chrono::steady_clock::time_point> exec_by;
};

struct SpawnResult {
  // `error` when the child found SpawnRequest::exec_by passed and did not exec.
  static constexpr int kPastDeadline = -1;
  pid_t pid = -1;     // > 0 once the program is running
  int error = 0;      // errno from execve (or fork) when it could not start, or kPastDeadline
};

// Forks and execs. The child gets the default signal dispositions and an empty signal mask,
// leads its own process group (unless told otherwise), and is sent SIGKILL if ddprun dies.
// Returns only after the exec succeeded or failed, so "could not start" (error != 0, child
// already reaped) is told apart from "started and failed".
SpawnResult spawn_process(const SpawnRequest& request);

// Raises this process's soft RLIMIT_NOFILE to its hard limit, as servers do (the default soft
// limit is often 1024): the rendezvous host keeps a connection per node and the workers' store
// one or two per worker, and their caps are fractions of this limit. Every process
// spawn_process() starts gets back the soft limit ddprun was started with, as torchrun's
// workers inherit the launcher's: a program that uses select() breaks on a descriptor above
// 1023, which a raised limit would let it open. Call once, before any thread starts.
void raise_file_limit();

// Where execvp would find `program` ("" if nowhere), and why not if not found.
struct ProgramLookup {
  std::string path;
  int error = 0;  // ENOENT, EACCES, ...
};
ProgramLookup find_program(const std::string& program, const std::string& search_path);
// The folders programs are looked up in: `environ`'s PATH, or a default when it has none.
std::string search_path(const std::map<std::string, std::string>& environ);

}  // namespace ddprun::launcher
