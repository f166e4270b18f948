// The orphan guard as the fence's backstop (process/orphan_guard.hpp): it SIGKILLs the watched
// process groups when the deadline ddprun gave it passes, not while ddprun keeps moving it, and
// not once it is cleared. Real processes: a guard forked from this test, and sleepers each in a
// process group of its own.
#include "process/orphan_guard.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace ddprun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

pid_t sleeper() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // before the guard is told of the group, whichever runs first
  return pid;
}

// Whether `pid` (a child of this test) ended by SIGKILL within `limit`; reaps it if so.
bool killed_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  int status = 0;
  while (Clock::now() < until) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void end(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST_CASE("the guard kills the watched groups once the fence's deadline passes, and not before") {
  OrphanGuard guard = OrphanGuard::start("", "");
  const pid_t worker = sleeper();
  guard.watch(worker);
  const auto deadline = Clock::now() + std::chrono::milliseconds(300);
  guard.fence_at(deadline);
  CHECK(killed_within(worker, std::chrono::seconds(20)));
  CHECK(Clock::now() >= deadline);
}

TEST_CASE("a deadline moved later and later never passes; a cleared one never comes") {
  OrphanGuard guard = OrphanGuard::start("", "");
  const pid_t worker = sleeper();
  guard.watch(worker);
  const auto first = Clock::now() + std::chrono::milliseconds(200);
  for (int i = 0; i < 8; ++i) {  // as ddprun does at each acknowledgement
    guard.fence_at(Clock::now() + std::chrono::milliseconds(200));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(Clock::now() > first);
  guard.fence_at(std::nullopt);
  // Past every deadline given: still alive. (Waiting here only proves that nothing comes.)
  CHECK_FALSE(killed_within(worker, std::chrono::milliseconds(600)));
  CHECK(::kill(worker, 0) == 0);
  end(worker);
}

TEST_CASE("a group forgotten before the deadline is not killed") {
  OrphanGuard guard = OrphanGuard::start("", "");
  const pid_t kept = sleeper();
  const pid_t forgotten = sleeper();
  guard.watch(kept);
  guard.watch(forgotten);
  guard.forget(forgotten);
  guard.fence_at(Clock::now() + std::chrono::milliseconds(100));
  CHECK(killed_within(kept, std::chrono::seconds(20)));
  CHECK(::kill(forgotten, 0) == 0);
  end(forgotten);
}

}  // namespace
}  // namespace ddprun::launcher
