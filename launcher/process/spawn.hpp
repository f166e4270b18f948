// Starting one worker process.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>

#include "process/start_request.hpp"

namespace ddprun::launcher {

struct SpawnResult {
  // `error` when the child found StartRequest::start_by passed and did not exec.
  static constexpr int kPastDeadline = -1;
  pid_t pid = -1;     // > 0 once the program is running
  int error = 0;      // errno from execve (or fork) when it could not start, or kPastDeadline
};

// Forks and execs. The child gets the default signal dispositions and an empty signal mask,
// leads its own process group (unless told otherwise), and is sent SIGKILL if ddprun dies.
// Returns only after the exec succeeded or failed, so "could not start" (error != 0, child
// already reaped) is told apart from "started and failed".
SpawnResult spawn_process(const StartRequest& request);

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
