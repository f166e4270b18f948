// Where a process is stuck: the main thread's frames in the stack tools' output, then a real
// process dumped by whichever tool is installed.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <asio/io_context.hpp>

#include "ddprun/system.hpp"
#include "hangs/stack_dump.hpp"
#include "run_until.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using ddprun::launcher::testing::run_until;
using ddprun::launcher::testing::temp_dir;

namespace {

// A file at `path` (its folders made), executable or not.
void program(const std::string& path, bool executable) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "#!/bin/sh\n";
  ::chmod(path.c_str(), executable ? 0755 : 0644);
}

std::string descendant_header(pid_t worker, pid_t python) {
  return "== worker " + std::to_string(worker) + " runs Python in its descendant " + std::to_string(python) +
         ": the stacks below are its ==\n";
}

// A process that sleeps 30 s, for a tool to dump; stop() ends it.
// A `sleep 30` that has exec'd when this returns (vfork: the parent waits for the exec), so that
// a stack tool started next meets sleep, not a copy of this test in the middle of a fork: that
// raced once ddprun's own spawn became as quick as posix_spawn.
pid_t sleeper() {
  const pid_t child = ::vfork();
  if (child == 0) {
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  return child;
}

void stop(pid_t child) {
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

// Runs `io`, reaping the dump's tool processes, until `done` (at most 10 s).
void reap_until(asio::io_context& io, StackDumper& dumper, const bool& done) {
  run_until(io, [&] {
    for (;;) {
      int status;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      dumper.child_exited(pid);
    }
    return done;
  });
}

// The stack tools installed here, for the tests that dump a real process; without a native one
// the test says so and is not checked.
std::optional<StackTools> installed_tools() {
  StackTools tools = find_stack_tools("/usr/local/bin:/usr/bin:/bin", {});
  if (tools.native.empty()) {
    MESSAGE("not checked: " << tools.native_missing);
    return std::nullopt;
  }
  return tools;
}

}  // namespace

TEST_CASE("top frames: Python's main thread when py-spy ran, else the native main thread") {
  const std::string eu_stack =
      "== eu-stack -p 77 ==\nPID 77 - process\nTID 78:\n#0  0x01 worker_thread\nTID 77:\n"
      "#0  0x00007f pselect\n#1  0x00005 wait_for\n#2  0x000055d94e5113d2\n#3  0x9 main\n";
  CHECK(top_frames(eu_stack, 77, 3) == std::vector<std::string>{"pselect", "wait_for", "0x000055d94e5113d2"});
  const std::string gdb =
      "== gdb -p 77 ==\nThread 1 (Thread 0x7f (LWP 77) \"train\"):\n#0  0x00007f in nanosleep () from /lib/libc.so.6\n"
      "#1  0x0000 in main ()\n";
  CHECK(top_frames(gdb, 77, 5) == std::vector<std::string>{"nanosleep () from /lib/libc.so.6", "main ()"});
  const std::string both = eu_stack +
      "== 'py-spy' dump --pid 77 ==\nProcess 77: python3 w.py\nThread 80 (idle): \"Thread-1\"\n    run (threading.py:1)\n"
      "Thread 77 (idle): \"MainThread\"\n    wait_for_data (w.py:12)\n    <module> (w.py:20)\n";
  CHECK(top_frames(both, 77, 5) == std::vector<std::string>{"wait_for_data (w.py:12)", "<module> (w.py:20)"});
  const std::string py_spy_04 = eu_stack +
      "== 'py-spy' dump --pid 77 ==\nProcess 77: python3 w.py\nPython v3.11.2 (/usr/bin/python3.11)\n\n"
      "Thread 80 (idle)\n    run (threading.py:1)\nThread 77 (idle)\n    stuck (w.py:3)\n    <module> (w.py:4)\n";
  CHECK(top_frames(py_spy_04, 77, 5) == std::vector<std::string>{"stuck (w.py:3)", "<module> (w.py:4)"});
  CHECK(top_frames("", 77, 5).empty());
}

TEST_CASE("stack dump of a real process, by whichever tool is installed") {
  const std::optional<StackTools> tools = installed_tools();
  if (!tools) return;
  asio::io_context io;
  const std::string dir = temp_dir();
  const pid_t child = sleeper();
  StackDumper dumper(io, *tools, {"PATH=/usr/bin:/bin"}, 30);
  bool done = false;
  REQUIRE(dumper.dump({{0, child, dir + "/stacks.txt", 0, ""}}, [&] { done = true; }));
  CHECK_FALSE(dumper.dump({{0, child, dir + "/other.txt", 0, ""}}, [] {}));  // one at a time
  reap_until(io, dumper, done);
  CHECK(done);
  stop(child);
  const std::string stacks = ddprun::read_file(dir + "/stacks.txt").value_or("");
  CHECK_MESSAGE(!top_frames(stacks, child, 10).empty(), stacks);
  std::filesystem::remove_all(dir);
}

TEST_CASE("py-spy: the first executable of the places given, else PATH's; else what is missing") {
  const std::string dir = temp_dir();
  program(dir + "/venv/bin/py-spy", true);
  program(dir + "/path/py-spy", true);
  program(dir + "/broken/py-spy", false);
  const std::string none = dir + "/none/py-spy";
  struct Row {
    std::vector<std::string> places;
    std::string path;
    std::string found;  // "" : not found
  };
  const std::vector<Row> table = {
      {{dir + "/venv/bin/py-spy"}, dir + "/path", dir + "/venv/bin/py-spy"},   // before PATH
      {{none, dir + "/broken/py-spy", dir + "/venv/bin/py-spy"}, "", dir + "/venv/bin/py-spy"},
      {{none}, dir + "/none:" + dir + "/path", dir + "/path/py-spy"},
      {{"", none, dir + "/broken/py-spy"}, dir + "/none", ""},
      {{}, "", ""},
  };
  for (const auto& row : table) {
    CAPTURE(row.places.size());
    CAPTURE(row.path);
    const StackTools tools = find_stack_tools(row.path, row.places);
    if (row.found.empty()) {
      CHECK(tools.python.empty());
      std::string looked;
      for (const auto& place : row.places) {
        if (!place.empty()) looked += (looked.empty() ? " nor at " : ", ") + place;
      }
      CHECK(tools.python_missing == "no Python stacks: py-spy is not in PATH" + looked +
                                        " (pip install py-spy, or the ddprun package: it brings py-spy); native "
                                        "stacks instead");
    } else {
      CHECK(tools.python == "'" + row.found + "' dump --pid {pid}");
      CHECK(tools.python_missing.empty());
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("what a worker's stacks lack: native tools for every worker, py-spy for those that run Python") {
  StackTools t;
  t.native_missing = "N";
  t.python_missing = "P";
  CHECK(t.missing(false) == "N");
  CHECK(t.missing(true) == "N; P");
  t.native_missing.clear();
  CHECK(t.missing(false).empty());
  CHECK(t.missing(true) == "P");
}

TEST_CASE("py-spy's places: the setting, beside ddprun, next to the workers' Python (found in PATH)") {
  const std::string dir = temp_dir();
  program(dir + "/venv/bin/python3", true);
  const std::string own = std::filesystem::read_symlink("/proc/self/exe").parent_path().string() + "/py-spy";
  CHECK(py_spy_places("/opt/py-spy", dir + "/venv/bin/python3", "") ==
        std::vector<std::string>{"/opt/py-spy", own, dir + "/venv/bin/py-spy"});
  CHECK(py_spy_places("", "python3", "/nowhere:" + dir + "/venv/bin") ==
        std::vector<std::string>{own, dir + "/venv/bin/py-spy"});
  CHECK(py_spy_places("", "python3", "/nowhere") == std::vector<std::string>{own});
  std::filesystem::remove_all(dir);
}

TEST_CASE("a worker that runs Python in a descendant: its stacks, said so first") {
  const std::optional<StackTools> tools = installed_tools();
  if (!tools) return;
  asio::io_context io;
  const std::string dir = temp_dir();
  // Two processes stand for the worker and its Python child; the dump reads only their pids.
  const pid_t worker = sleeper();
  const pid_t python = sleeper();
  StackTools no_py_spy = *tools;
  no_py_spy.python.clear();
  no_py_spy.python_missing = "no Python stacks: py-spy is not in PATH";
  StackDumper dumper(io, no_py_spy, {"PATH=/usr/bin:/bin"}, 30);
  bool done = false;
  StackDumper::Target target{0, worker, dir + "/stacks.txt", python, ""};
  CHECK(target.stacked() == python);
  REQUIRE(dumper.dump({target}, [&] { done = true; }));
  reap_until(io, dumper, done);
  CHECK(done);
  stop(worker);
  stop(python);
  const std::string stacks = ddprun::read_file(dir + "/stacks.txt").value_or("");
  CHECK_MESSAGE(stacks.rfind(descendant_header(worker, python) + "== no Python stacks: py-spy is not in PATH ==\n", 0) == 0,
                stacks);
  CHECK_MESSAGE(stacks.find(" -p " + std::to_string(python)) != std::string::npos, stacks);
  CHECK_MESSAGE(stacks.find(" -p " + std::to_string(worker)) == std::string::npos, stacks);
  CHECK_MESSAGE(!top_frames(stacks, python, 10).empty(), stacks);
  std::filesystem::remove_all(dir);
}
