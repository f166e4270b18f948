// The orphan guard (process/orphan_guard.hpp) as the fence's backstop: it SIGKILLs the watched
// process groups when the deadline ddprun gave it passes, not while ddprun keeps moving it, and
// not once it is cleared; and as the holder of ddprun's connection, which ends only after the
// workers are dead, also those ddprun had no time to tell it of. With it, spawn_process()'s child,
// which does not exec past the fence's deadline (StartRequest::start_by). Real processes: a guard
// forked from this test, and sleepers each in a process group of its own.
#include "process/orphan_guard.hpp"

#include "process/containment.hpp"
#include "process/spawn.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
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

// What spawn_process() makes of `sleep 60`.
StartRequest sleep_request() {
  StartRequest request;
  request.argv = {"sleep", "60"};
  request.environ = {"PATH=/usr/bin:/bin"};
  return request;
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

// One test case's guard. At the case's end its socket is closed, as at ddprun's end, and its exit
// waited for: a guard still at work (a fence's scan of /proc for this test's children, which
// comes after its kills) must not reach the next case's processes.
class TestGuard {
 public:
  explicit TestGuard(const std::string& cgroup) : guard_(OrphanGuard::start(cgroup, "")), pid_(guard_->pid()) {}
  ~TestGuard() {
    reset();
    ::waitpid(pid_, nullptr, 0);
  }
  OrphanGuard* operator->() { return &*guard_; }
  void reset() { guard_.reset(); }  // as when ddprun is SIGKILLed; the guard carries on alone

 private:
  std::optional<OrphanGuard> guard_;
  pid_t pid_;
};

void end(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST_CASE("the guard kills the watched groups once the fence's deadline passes, and not before") {
  TestGuard guard("");
  const pid_t worker = sleeper();
  guard->watch(worker);
  const auto deadline = Clock::now() + std::chrono::milliseconds(300);
  guard->fence_at(deadline);
  CHECK(killed_within(worker, std::chrono::seconds(20)));
  CHECK(Clock::now() >= deadline);
}

TEST_CASE("a deadline moved later and later never passes; a cleared one never comes") {
  TestGuard guard("");
  const pid_t worker = sleeper();
  guard->watch(worker);
  // Each deadline 1 s ahead, moved every 100 ms: only a stall of this test of over 0.9 s between
  // two moves would let one pass (0.15 s did once, on the loaded 2-core machine).
  constexpr auto kAhead = std::chrono::milliseconds(1000);
  const auto first = Clock::now() + kAhead;
  guard->fence_at(first);
  while (Clock::now() <= first + std::chrono::milliseconds(100)) {  // as ddprun does at each acknowledgement
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    guard->fence_at(Clock::now() + kAhead);
  }
  guard->fence_at(std::nullopt);
  // Past every deadline given: still alive. (Waiting here only proves that nothing comes.)
  CHECK_FALSE(killed_within(worker, kAhead + std::chrono::milliseconds(200)));
  CHECK(::kill(worker, 0) == 0);
  end(worker);
}

// At ddprun's end, not at a fence: there the guard kills every child group of ddprun's, told of
// or not (children_groups()).
TEST_CASE("a group forgotten is not killed when ddprun is gone") {
  std::optional<TestGuard> guard(std::in_place, "");
  const pid_t kept = sleeper();
  const pid_t forgotten = sleeper();
  (*guard)->watch(kept);
  (*guard)->watch(forgotten);
  (*guard)->forget(forgotten);
  guard.reset();  // its end waited for
  CHECK(killed_within(kept, std::chrono::seconds(20)));
  CHECK(::waitpid(forgotten, nullptr, WNOHANG) == 0);  // neither ended nor a zombie
  end(forgotten);
}

// A loopback connection: the client's descriptor (for the guard) and the server's accepted one.
struct Connection {
  int client = -1;
  int server = -1;
};

Connection connect_loopback() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  Connection c;
  c.client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::connect(c.client, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  c.server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  return c;
}

// Whether the server's side reads the connection's end within `limit`.
bool ended_within(int server, std::chrono::milliseconds limit) {
  pollfd ready{server, POLLIN, 0};
  if (::poll(&ready, 1, static_cast<int>(limit.count())) != 1) return false;
  char byte;
  return ::read(server, &byte, 1) == 0;
}

TEST_CASE("a connection the guard holds ends only when ddprun's copy and then the guard's are closed") {
  TestGuard guard("");
  const Connection c = connect_loopback();
  guard->hold_connection(c.client);
  ::close(c.client);  // ddprun's own close
  // The guard's copy keeps it open. (Waiting here only proves that nothing comes.)
  CHECK_FALSE(ended_within(c.server, std::chrono::milliseconds(300)));
  guard->drop_connection(c.client);
  CHECK(ended_within(c.server, std::chrono::seconds(20)));
  ::close(c.server);
}

TEST_CASE("when ddprun is gone, its connection ends only after its workers were killed") {
  TestGuard guard("");
  const pid_t worker = sleeper();
  guard->watch(worker);
  const Connection c = connect_loopback();
  guard->hold_connection(c.client);
  ::close(c.client);
  guard.reset();  // the guard's socket closes, as when ddprun is SIGKILLed
  REQUIRE(ended_within(c.server, std::chrono::seconds(20)));
  // By the time the connection's end could be read, the worker had been killed.
  int status = 0;
  CHECK(::waitpid(worker, &status, WNOHANG) == worker);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  ::close(c.server);
}

// A worker that ddprun would have told the guard of after spawn_process() returned, had it not
// been SIGKILLed first: the child told it itself before its exec.
TEST_CASE("a worker whose ddprun is gone before it told the guard is killed before the connection ends") {
  TestGuard guard("");
  StartRequest request = sleep_request();
  request.guard_fd = guard->socket();
  const SpawnResult worker = spawn_process(request);
  REQUIRE(worker.pid > 0);
  const Connection c = connect_loopback();
  guard->hold_connection(c.client);
  ::close(c.client);
  guard.reset();  // no watch(): ddprun is gone right after the fork
  REQUIRE(ended_within(c.server, std::chrono::seconds(20)));
  int status = 0;
  CHECK(::waitpid(worker.pid, &status, WNOHANG) == worker.pid);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  if (::waitpid(worker.pid, nullptr, WNOHANG) == 0) end(worker.pid);
  ::close(c.server);
}

TEST_CASE("an exec that failed takes the child's registration back") {
  // The guard would otherwise kill that process group's id later, by then another's.
  TestGuard guard("");
  StartRequest request;
  request.argv = {"/nonexistent/ddprun-test-program"};
  request.guard_fd = guard->socket();
  CHECK(spawn_process(request).error == ENOENT);
  const pid_t kept = sleeper();
  guard->watch(kept);
  const Connection c = connect_loopback();
  guard->hold_connection(c.client);
  ::close(c.client);
  guard.reset();
  REQUIRE(ended_within(c.server, std::chrono::seconds(20)));
  CHECK(killed_within(kept, std::chrono::seconds(20)));
  ::close(c.server);
}

// ddprun's cgroup (made at `path`) with its round's folder ready; nullptr, said, where there is no
// writable cgroup v2.
std::unique_ptr<Containment> round_cgroup(std::string& path) {
  path = Containment::planned_path({});
  std::unique_ptr<Containment> containment = path.empty() ? nullptr : Containment::create(path);
  if (!containment || !containment->has_cgroup()) {
    MESSAGE("skipped: no writable cgroup v2 here");
    return nullptr;
  }
  containment->prepare_round();
  return containment;
}

// `sleep 60` made in the round's cgroup.
StartRequest sleep_in(const Containment& containment) {
  StartRequest request = sleep_request();
  request.cgroup_dir_fd = containment.dir_fd();
  request.cgroup_procs_fd = containment.procs_fd();
  return request;
}

// ddprun checked the fence's deadline before the fork, and was stopped until past it: the child,
// which looks last, does not exec, and takes its registration back as after a failed exec.
TEST_CASE("a child that finds the fence's deadline passed does not exec; one before it does") {
  TestGuard guard("");
  StartRequest request = sleep_request();
  request.guard_fd = guard->socket();
  request.start_by = Clock::now();
  CHECK(spawn_process(request).error == SpawnResult::kPastDeadline);
  request.start_by = Clock::now() + std::chrono::seconds(60);
  const SpawnResult started = spawn_process(request);
  REQUIRE(started.pid > 0);
  CHECK(started.error == 0);
  const Connection c = connect_loopback();
  guard->hold_connection(c.client);
  ::close(c.client);
  guard.reset();
  REQUIRE(ended_within(c.server, std::chrono::seconds(20)));
  CHECK(killed_within(started.pid, std::chrono::seconds(20)));
  ::close(c.server);

  // Made in a cgroup (clone3), the child first says that it runs, then that it did not exec.
  std::string path;
  const auto containment = round_cgroup(path);
  if (!containment) return;
  StartRequest in_cgroup = sleep_in(*containment);
  in_cgroup.start_by = Clock::now();
  CHECK(spawn_process(in_cgroup).error == SpawnResult::kPastDeadline);
}

// ddprun with a cgroup tells the guard of no group: the cgroup is emptied before the connection
// ends.
TEST_CASE("with a cgroup, ddprun's connection ends only after the cgroup's processes are gone") {
  std::string path;
  const auto containment = round_cgroup(path);
  if (!containment) return;
  TestGuard guard(path);
  const StartRequest request = sleep_in(*containment);
  const SpawnResult worker = spawn_process(request);
  REQUIRE(worker.pid > 0);
  const Connection c = connect_loopback();
  guard->hold_connection(c.client);
  ::close(c.client);
  guard.reset();
  REQUIRE(ended_within(c.server, std::chrono::seconds(30)));
  int status = 0;
  CHECK(::waitpid(worker.pid, &status, WNOHANG) == worker.pid);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  ::close(c.server);
}

}  // namespace
}  // namespace ddprun::launcher
