// Python stacks from a worker's faulthandler: the signal masks that tell whether it can be asked
// and when it has answered, its frames in the summary's form, and a real Python process with
// ddprun's bootstrap asked by the stack dumper without py-spy.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <asio/io_context.hpp>

#include "ddprun/system.hpp"
#include "ddprun/worker_env.hpp"
#include "hangs/python_stacks.hpp"
#include "hangs/stack_dump.hpp"
#include "run_until.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using ddprun::launcher::testing::run_until;
using ddprun::launcher::testing::temp_dir;

TEST_CASE("signal masks from /proc/PID/task/TID/status") {
  const std::string status =
      "Name:\tpython3\nState:\tS (sleeping)\nSigQ:\t0/95435\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n"
      "SigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000008000000002\nCapInh:\t0000000000000000\n";
  const auto masks = parse_signal_masks(status);
  REQUIRE(masks);
  CHECK(masks->pending == 0);
  CHECK(masks->blocked == 0);
  CHECK(masks->caught == 0x0000008000000002ULL);
  CHECK_FALSE(parse_signal_masks("Name:\tx\nSigPnd:\t0\nSigBlk:\t0\n"));       // no SigCgt
  CHECK_FALSE(parse_signal_masks("SigPnd:\tzz\nSigBlk:\t0\nSigCgt:\t0\n"));    // not hex
  CHECK_FALSE(parse_signal_masks(""));
}

TEST_CASE("whether a signal is caught, and when its handler has run") {
  const int sig = 40;  // bit 39
  const std::uint64_t bit = std::uint64_t{1} << 39;
  struct Row {
    const char* state;
    SignalMasks masks;
    bool catches, done;
  };
  const Row rows[] = {
      {"no handler (python -I: no bootstrap)", {0, 0, 0}, false, true},
      {"handler, idle", {0, 0, bit}, true, true},
      {"handler, signal blocked by the program", {0, bit, bit}, false, false},
      {"sent, not yet taken", {bit, 0, bit}, true, false},
      {"in the handler (it blocks its own signal)", {0, bit, bit}, false, false},
      {"another signal pending and blocked", {1, 1, bit}, true, true},
  };
  for (const Row& row : rows) {
    CAPTURE(row.state);
    CHECK(catches(row.masks, sig) == row.catches);
    CHECK(handler_done(row.masks, sig) == row.done);
  }
  CHECK_FALSE(catches({0, 0, ~std::uint64_t{0}}, 65));  // not a signal
}

TEST_CASE("faulthandler's frames in the summary's form") {
  struct Row {
    const char* line;
    std::optional<std::string> frame;
  };
  const Row rows[] = {
      {"  File \"/tmp/x.py\", line 12 in stuck", "stuck (/tmp/x.py:12)"},
      {"  File \"/tmp/x.py\", line 20 in <module>", "<module> (/tmp/x.py:20)"},
      {"  File \"/tmp/a \"b\".py\", line 3 in f", "f (/tmp/a \"b\".py:3)"},  // a quote in the name, written as is
      {"Current thread 0x00007f (most recent call first):", std::nullopt},
      {"  <no Python frame>", std::nullopt},
      {"  File \"x.py\", line 3", std::nullopt},
      {"", std::nullopt},
  };
  for (const Row& row : rows) {
    CAPTURE(row.line);
    CHECK(faulthandler_frame(row.line) == row.frame);
  }
}

TEST_CASE("top frames: faulthandler's current thread where py-spy gave none") {
  const std::string eu_stack = "== eu-stack -p 77 ==\nPID 77 - process\nTID 77:\n#0  0x00007f select\n#1  0x9 main\n";
  const std::string faulthandler =
      "== faulthandler of 77 (signal 40, every thread) ==\n"
      "Thread 0x00007f1 (most recent call first):\n  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n\n"
      "Current thread 0x00007f2 (most recent call first):\n  File \"/t/w.py\", line 3 in stuck\n"
      "  File \"/t/w.py\", line 9 in <module>\n";
  CHECK(top_frames(eu_stack + faulthandler, 77, 5) == std::vector<std::string>{"stuck (/t/w.py:3)", "<module> (/t/w.py:9)"});
  CHECK(has_python_frames(eu_stack + faulthandler, 77));
  CHECK_FALSE(has_python_frames(eu_stack, 77));
  // py-spy failed (no ptrace rights): its section has no frames, faulthandler's has.
  const std::string failed = "== 'py-spy' dump --pid 77 ==\nError: Permission denied (os error 13)\n\n";
  CHECK_FALSE(has_python_frames(eu_stack + failed, 77));
  CHECK(top_frames(eu_stack + failed + faulthandler, 77, 1) == std::vector<std::string>{"stuck (/t/w.py:3)"});
}

namespace {

// A python3 process with ddprun's bootstrap first on its PYTHONPATH, stuck in a function named
// stuck_in_python once it wrote "ready" to `ready`; nullopt without python3.
std::optional<pid_t> python_worker(const std::string& dir, const std::string& stacks_file) {
  const std::string bootstrap = std::string(DDPRUN_SOURCE_DIR) + "/launcher/python_bootstrap";
  const std::string script = dir + "/stuck.py";
  {
    std::FILE* f = std::fopen(script.c_str(), "w");
    std::fputs("import os, sys, time\ndef stuck_in_python():\n    open(sys.argv[1], 'w').close()\n"
               "    while True:\n        time.sleep(3600)\nstuck_in_python()\n", f);
    std::fclose(f);
  }
  if (::access("/usr/bin/python3", X_OK) != 0) return std::nullopt;
  const std::string path_var = "PYTHONPATH=" + bootstrap;
  const std::string file_var = std::string(ddprun::env::kPythonStacksFile) + "=" + stacks_file;
  const std::string no_bytecode = "PYTHONDONTWRITEBYTECODE=1";  // nothing written into the source tree
  const std::string signal_var =
      std::string(ddprun::env::kPythonStacksSignal) + "=" + std::to_string(ddprun::env::python_stacks_signal());
  const std::string ready = dir + "/ready";
  const pid_t child = ::fork();
  if (child == 0) {
    char* const argv[] = {const_cast<char*>("python3"), const_cast<char*>(script.c_str()),
                          const_cast<char*>(ready.c_str()), nullptr};
    char* const envp[] = {const_cast<char*>(path_var.c_str()), const_cast<char*>(file_var.c_str()),
                          const_cast<char*>(signal_var.c_str()), const_cast<char*>(no_bytecode.c_str()), nullptr};
    ::execve("/usr/bin/python3", argv, envp);
    ::_exit(127);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(ready) && std::chrono::steady_clock::now() < until) ::usleep(10000);
  return child;
}

}  // namespace

TEST_CASE("a Python worker without py-spy: its faulthandler answers, every thread, after the native tools") {
  const std::string dir = temp_dir();
  const std::string answers = dir + "/python_stacks";
  const auto child = python_worker(dir, answers);
  if (!child) {
    MESSAGE("not checked: no /usr/bin/python3");
    return;
  }
  REQUIRE(std::filesystem::exists(dir + "/ready"));
  const auto masks = read_signal_masks(*child, *child);
  REQUIRE(masks);
  CHECK(catches(*masks, ddprun::env::python_stacks_signal()));  // the bootstrap registered it
  StackTools tools = find_stack_tools("/usr/local/bin:/usr/bin:/bin", {"/nonexistent/py-spy"});
  tools.python.clear();  // as if py-spy were not installed
  tools.python_missing = "no Python stacks: py-spy is not in PATH";
  asio::io_context io;
  StackDumper dumper(io, tools, {"PATH=/usr/bin:/bin"}, 30);
  StackDumper::Target target{0, *child, dir + "/stacks.txt", *child, answers};
  bool done = false;
  REQUIRE(dumper.dump({target}, [&] { done = true; }));
  run_until(io, [&] {
    int status;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) dumper.child_exited(pid);
    return done;
  });
  REQUIRE(done);
  const std::string stacks = ddprun::read_file(dir + "/stacks.txt").value_or("");
  ::kill(*child, SIGKILL);
  ::waitpid(*child, nullptr, 0);
  CHECK_MESSAGE(stacks.find("== faulthandler of " + std::to_string(*child)) != std::string::npos, stacks);
  CHECK_MESSAGE(!top_frames(stacks, *child, 5).empty(), stacks);
  CHECK_MESSAGE(top_frames(stacks, *child, 5).front().rfind("stuck_in_python (", 0) == 0, stacks);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a process that does not catch the signal is never sent it") {
  const std::string dir = temp_dir();
  const pid_t child = ::vfork();  // exec'd on return: sleep's masks, not a copy of this test's
  if (child == 0) {
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  // sleep never installs a handler: asking it would end it.
  StackTools tools;
  asio::io_context io;
  StackDumper dumper(io, tools, {}, 30);
  StackDumper::Target target{0, child, dir + "/stacks.txt", child, dir + "/python_stacks"};
  bool done = false;
  REQUIRE(dumper.dump({target}, [&] { done = true; }));
  CHECK(done);  // no tool, nothing asked: done at once
  int status = 0;
  CHECK(::waitpid(child, &status, WNOHANG) == 0);  // still running
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::filesystem::remove_all(dir);
}
