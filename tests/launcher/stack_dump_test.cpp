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
#include <sstream>
#include <string>
#include <vector>

#include <asio/io_context.hpp>

#include "hangs/stack_dump.hpp"
#include "run_until.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using ddprun::launcher::testing::run_until;
using ddprun::launcher::testing::temp_dir;

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
  CHECK(top_frames("", 77, 5).empty());
}

TEST_CASE("stack dump of a real process, by whichever tool is installed") {
  const StackTools tools = find_stack_tools("/usr/local/bin:/usr/bin:/bin", false, "");
  if (tools.native.empty()) {
    MESSAGE("not checked: " << tools.missing);
    return;
  }
  asio::io_context io;
  const std::string dir = temp_dir();
  const pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  StackDumper dumper(io, tools, {"PATH=/usr/bin:/bin"}, 30);
  bool done = false;
  REQUIRE(dumper.dump({{0, child, dir + "/stacks.txt"}}, [&] { done = true; }));
  CHECK_FALSE(dumper.dump({{0, child, dir + "/other.txt"}}, [] {}));  // one at a time
  run_until(io, [&] {
    for (;;) {
      int status;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      dumper.child_exited(pid);
    }
    return done;
  });
  CHECK(done);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::ifstream in(dir + "/stacks.txt");
  std::stringstream text;
  text << in.rdbuf();
  const auto frames = top_frames(text.str(), child, 10);
  CHECK_MESSAGE(!frames.empty(), text.str());
  std::filesystem::remove_all(dir);
}
