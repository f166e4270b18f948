// Keeps workers and their children from outliving ddprun, however ddprun ends.
//
// A worker gets PR_SET_PDEATHSIG, but its own children do not, and a SIGKILLed ddprun cannot
// clean up. So ddprun forks this small guard first thing: it learns every worker's process
// group through a pipe and, when the pipe closes (ddprun exited or was killed), sends SIGKILL
// to the groups still registered. It ignores terminal and job-control signals; it ends with ddprun.
#pragma once

#include <sys/types.h>

#include "unique_fd.hpp"

namespace ddprun::launcher {

class OrphanGuard {
 public:
  // Forks the guard. Call before any other thread or worker exists.
  static OrphanGuard start();
  OrphanGuard() = default;

  // A worker's process group to kill if ddprun dies.
  void watch(pid_t process_group);
  // The group has been cleaned up; its id may be reused.
  void forget(pid_t process_group);

 private:
  explicit OrphanGuard(UniqueFd to_guard) : to_guard_(std::move(to_guard)) {}
  void send(char op, pid_t process_group);
  UniqueFd to_guard_;
};

}  // namespace ddprun::launcher
