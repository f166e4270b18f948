// The processes below a worker: the tree of a real shell that runs Python as a child, found by
// the program each process runs.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "process/process_tree.hpp"

using namespace ddprun::launcher;

namespace {

pid_t start(const char* script) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sh", "sh", "-c", script, nullptr);
    ::_exit(127);
  }
  ::setpgid(child, child);
  return child;
}

void stop(pid_t child) {
  ::kill(-child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

// Waits (at most 10 s) until `child` has a descendant that runs Python: the shell forked it, and
// it execed the interpreter.
pid_t wait_for_python(pid_t child) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  pid_t python = 0;
  while ((python = python_process(child)) == 0 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return python;
}

}  // namespace

TEST_CASE("a shell that runs python3 as a child: the tree, and the Python process in it") {
  // "; exit" keeps sh from exec'ing python3 in its own place.
  const pid_t shell = start("python3 -c 'import time; time.sleep(60)'; exit 3");
  const pid_t python = wait_for_python(shell);
  REQUIRE(python != 0);
  CHECK(python != shell);
  CHECK_FALSE(runs_python(shell));
  CHECK(runs_python(python));
  const auto tree = process_tree(shell);
  REQUIRE(tree.size() == 2);
  CHECK(tree[0] == shell);
  CHECK(tree[1] == python);
  CHECK(children_of(shell) == std::vector<pid_t>{python});
  stop(shell);
}

TEST_CASE("a shell that execs python3: the worker itself is the Python process") {
  const pid_t worker = start("exec python3 -c 'import time; time.sleep(60)'");
  CHECK(wait_for_python(worker) == worker);
  stop(worker);
}

TEST_CASE("no Python anywhere in the tree: none") {
  const pid_t worker = start("sleep 60 & sleep 60; exit 0");
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (process_tree(worker).size() < 3 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(process_tree(worker).size() == 3);
  CHECK(python_process(worker) == 0);
  stop(worker);
}

TEST_CASE("what a gone ddprun left: its pid in the name, when no process has that pid") {
  // A pid that is free now: a child's, once reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  const std::string prefix = "ddprun.4026531836.";
  struct Row {
    std::string name;
    pid_t expected;
  };
  const std::vector<Row> rows = {
      {prefix + dead, child},                   // a cgroup: ddprun.<ns>.<pid>
      {prefix + dead + ".run-Ab12Cd", child},   // a private folder: ddprun.<ns>.<pid>.<run id>-XXXXXX
      {prefix + alive, 0},                      // its ddprun still runs
      {prefix + alive + ".run-Ab12Cd", 0},
      {"ddprun.1." + dead, 0},                  // another PID namespace's
      {prefix + dead + "x", 0},                 // not a pid
      {prefix, 0},
      {prefix + "0", 0},
      {prefix + "-5", 0},
      {prefix + "99999999999999999999", 0},
      {"ddprun-logs-x", 0},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    CHECK(dead_pid_in_name(row.name, prefix) == row.expected);
  }
  CHECK(pid_namespace().find_first_not_of("0123456789") == std::string::npos);
}

TEST_CASE("/proc/PID/stat: state, parent, group and the arguments' bounds, whatever the name holds") {
  const std::string tail =
      " 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 26107 3133440 415 18446744073709551615 94862519242752 "
      "94862519262633 140721108752880 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94862519278640 94862519280256 "
      "94862814568448 140721108757116 140721108757136 140721108757136 140721108758507 0\n";
  const auto stat = parse_proc_stat("11277 (cat) R 11273 11270 6079" + tail);
  REQUIRE(stat);
  CHECK(stat->pid == 11277);
  CHECK(stat->state == 'R');
  CHECK(stat->parent == 11273);
  CHECK(stat->process_group == 11270);
  CHECK(stat->arg_start == 140721108757116ULL);
  CHECK(stat->arg_end == 140721108757136ULL);

  // A name may hold spaces, parentheses and a newline: the fields start after the last ')'.
  const auto odd = parse_proc_stat("42 (a) Z (b\n) Z 1 42 6079" + tail);
  REQUIRE(odd);
  CHECK(odd->state == 'Z');
  CHECK(odd->parent == 1);
  CHECK(odd->process_group == 42);

  // Before Linux 3.5, no arguments' bounds.
  const auto old = parse_proc_stat("7 (sh) S 1 7 7 0 -1 4194304");
  REQUIRE(old);
  CHECK(old->arg_start == 0);
  CHECK(old->arg_end == 0);

  CHECK_FALSE(parse_proc_stat(""));
  CHECK_FALSE(parse_proc_stat("12 (cut short"));
  CHECK_FALSE(parse_proc_stat("12 (x) S"));
}

TEST_CASE("this process's own /proc/PID/stat, and among every process's") {
  const auto self = proc_stat(::getpid());
  REQUIRE(self);
  CHECK(self->pid == ::getpid());
  CHECK(self->parent == ::getppid());
  CHECK(self->process_group == ::getpgrp());
  CHECK(self->arg_start > 0);
  CHECK(self->arg_end > self->arg_start);
  const auto all = all_proc_stats();
  CHECK(std::any_of(all.begin(), all.end(), [](const ProcStat& p) { return p.pid == ::getpid(); }));
}
