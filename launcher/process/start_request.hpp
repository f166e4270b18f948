// One process to start, the same request for both ways a worker starts: cold, exec'd by
// spawn_process() (spawn.hpp), or, for a Python worker under --warm_start, forked from the warm
// interpreter by Zygote::fork_worker() (zygote.hpp). WorkerGroup::start_process() chooses the way.
#pragma once

#include <sched.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

struct StartRequest {
  // The command line; argv[0] is looked up in PATH unless it has a '/'. A fork takes worker_argv()'s
  // `PYTHON -u [-m] PROGRAM ARGS` (launch_config.hpp): the warm interpreter is that PYTHON, and runs
  // PROGRAM ARGS as `python -u` would.
  std::vector<std::string> argv;
  std::vector<std::string> environ;  // the whole environment, "NAME=value"
  int stdout_fd = -1;                // -1: inherit ddprun's (cold only: a fork needs both)
  int stderr_fd = -1;
  // False only in --debug, to keep the terminal (its worker is never forked).
  bool own_process_group = true;
  // The round's cgroup, as a folder (the cold child is made there by clone3) and as its
  // cgroup.procs, which a cold child that clone3 could not make there, and a forked worker, write
  // themselves into. -1: none.
  int cgroup_dir_fd = -1;
  int cgroup_procs_fd = -1;
  const cpu_set_t* cpus = nullptr;  // --numa_binding: the CPUs it runs on; nullptr: its parent's
  // Cold only: the orphan guard's socket, where the child registers its group before its exec
  // (OrphanGuard::watch_from_child); -1: not. A forked worker's group is told by ddprun, which has
  // no way into it before it runs.
  int guard_fd = -1;
  // The fence's deadline: the process does not start at or after it. It looks at the clock last,
  // once it leads its own group (and told the guard of it): a cold child does not exec
  // (SpawnResult::kPastDeadline), a forked worker kills itself (SIGKILL) before the program's
  // first line. So a program that runs was started before the deadline, and the guard's backstop,
  // which fires after it, finds its group (orphan_guard.hpp). nullopt: none.
  std::optional<std::chrono::steady_clock::time_point> start_by;
};

}  // namespace ddprun::launcher
