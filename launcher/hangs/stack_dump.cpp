#include "hangs/stack_dump.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "ddprun/system.hpp"
#include "ddprun/text.hpp"
#include "ddprun/worker_env.hpp"
#include "hangs/python_stacks.hpp"
#include "process/spawn.hpp"
#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {
namespace {

// The header of faulthandler's answer in a stacks file, which top_frames() knows.
constexpr std::string_view kFaulthandlerHeader = "== faulthandler";
// A faulthandler answers within microseconds once its thread runs; a thread that is stopped
// (SIGSTOP) or in an uninterruptible wait does not take the signal until it is woken.
constexpr auto kFaulthandlerTimeout = std::chrono::seconds(10);
constexpr auto kFaulthandlerPoll = std::chrono::milliseconds(2);

std::string with_pid(std::string command, pid_t pid) {
  const std::string token = "{pid}";
  for (size_t at = command.find(token); at != std::string::npos; at = command.find(token, at)) {
    command.replace(at, token.size(), std::to_string(pid));
  }
  return command;
}

}  // namespace

std::string StackTools::missing(bool python_worker) const {
  if (!python_worker || python_missing.empty()) return native_missing;
  return native_missing.empty() ? python_missing : native_missing + "; " + python_missing;
}

StackTools find_stack_tools(const std::string& path, const std::vector<std::string>& py_spy_first) {
  StackTools t;
  if (!find_program("eu-stack", path).path.empty()) {
    t.native = "eu-stack -p {pid}";
  } else if (!find_program("gdb", path).path.empty()) {
    t.native = "gdb -p {pid} -batch -nx -q -ex 'thread apply all bt'";
  } else {
    t.native_missing = "no native stacks: neither eu-stack (apt install elfutils) nor gdb is installed";
  }
  std::string py_spy;
  for (const auto& candidate : py_spy_first) {
    if (py_spy.empty() && !candidate.empty() && ::access(candidate.c_str(), X_OK) == 0) py_spy = candidate;
  }
  if (py_spy.empty()) py_spy = find_program("py-spy", path).path;
  if (!py_spy.empty()) {
    t.python = "'" + py_spy + "' dump --pid {pid}";
  } else {
    std::string looked;
    for (const auto& candidate : py_spy_first) {
      if (!candidate.empty()) looked += (looked.empty() ? " nor at " : ", ") + candidate;
    }
    t.python_missing = fmt::format(
        "no Python stacks: py-spy is not in PATH{} (pip install py-spy, or the ddprun package: it brings py-spy); "
        "native stacks instead",
        looked);
  }
  return t;
}

std::vector<std::string> py_spy_places(const std::string& setting, const std::string& python, const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> places;
  if (!setting.empty()) places.push_back(setting);
  std::error_code ec;
  const fs::path own = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) places.push_back((own.parent_path() / "py-spy").string());
  const std::string python_path = python.find('/') != std::string::npos ? python : find_program(python, path).path;
  if (!python_path.empty()) {
    const std::string beside = (fs::path(python_path).parent_path() / "py-spy").string();
    if (std::find(places.begin(), places.end(), beside) == places.end()) places.push_back(beside);
  }
  return places;
}

namespace {

// The main thread's frames in a file that stack_dump wrote, Python's and native.
struct MainThreadFrames {
  std::vector<std::string> python, native;
};

MainThreadFrames main_thread_frames(const std::string& stacks, pid_t pid, int n) {
  // py-spy: 'Thread 123 (idle): "MainThread"' (0.4: 'Thread 123 (idle)') then indented frames; eu-stack: "TID 123:" then
  // "#0  0x... name"; gdb: 'Thread 1 (Thread 0x... (LWP 123) "name"):' then "#0  0x... in name ()"; faulthandler:
  // 'Current thread 0x... (most recent call first):' (the thread that took the signal: ddprun sends it to the main
  // thread) then '  File "x.py", line 3 in name', and 'Thread 0x...' for the others.
  MainThreadFrames frames;
  std::istringstream in(stacks);
  std::string line;
  enum { kNone, kPySpy, kFaulthandler, kNative } section = kNone;
  bool main_thread = false;
  const std::string tid = std::to_string(pid);
  const auto take = [n](std::vector<std::string>& into, std::string frame) {
    if (static_cast<int>(into.size()) < n) into.push_back(std::move(frame));
  };
  while (std::getline(in, line)) {
    if (line.rfind("== ", 0) == 0) {
      section = line.rfind(kFaulthandlerHeader, 0) == 0        ? kFaulthandler
                : line.find("py-spy") != std::string::npos ? kPySpy
                                                           : kNative;
      main_thread = false;
      continue;
    }
    if (section == kPySpy) {
      if (line.rfind("Thread ", 0) == 0) {
        // py-spy 0.3 names the thread; 0.4 gives its id only (the process's own id for the main one).
        main_thread = line.find("\"MainThread\"") != std::string::npos || line.rfind("Thread " + tid + " ", 0) == 0;
      } else if (main_thread && line.rfind("    ", 0) == 0) {
        take(frames.python, std::string(trim_left(line, " \t")));
      }
    } else if (section == kFaulthandler) {
      if (line.rfind("Thread ", 0) == 0 || line.rfind("Current thread ", 0) == 0) {
        main_thread = line.rfind("Current thread ", 0) == 0;
      } else if (main_thread) {
        if (auto frame = faulthandler_frame(line)) take(frames.python, std::move(*frame));
      }
    } else if (section == kNative) {
      if (line.rfind("TID ", 0) == 0) {
        main_thread = line == "TID " + tid + ":";
      } else if (line.rfind("Thread ", 0) == 0) {
        main_thread = line.find("(LWP " + tid + ")") != std::string::npos;
      } else if (main_thread && line.rfind("#", 0) == 0) {
        std::istringstream fields(line);
        std::string number, address, rest;
        fields >> number >> address;
        std::getline(fields, rest);
        rest = std::string(trim_left(rest, " \t"));
        if (rest.rfind("in ", 0) == 0) rest = rest.substr(3);
        take(frames.native, rest.empty() ? address : rest);
      }
    }
  }
  return frames;
}

}  // namespace

std::vector<std::string> top_frames(const std::string& stacks, pid_t pid, int n) {
  MainThreadFrames frames = main_thread_frames(stacks, pid, n);
  return frames.python.empty() ? std::move(frames.native) : std::move(frames.python);
}

bool has_python_frames(const std::string& stacks, pid_t pid) { return !main_thread_frames(stacks, pid, 1).python.empty(); }

StackDumper::StackDumper(asio::io_context& io, StackTools tools, std::vector<std::string> environ,
                         double timeout_seconds)
    : tools_(std::move(tools)), environ_(std::move(environ)), timeout_(timeout_seconds), timer_(io) {}

bool StackDumper::dump(const std::vector<Target>& targets, std::function<void()> done) {
  if (busy()) return false;
  done_ = std::move(done);
  targets_ = targets;
  for (const auto& target : targets) {
    UniqueFd file(::open(target.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!file) continue;
    // What the tools' output cannot say comes first, written here (the tool processes append:
    // they share this file's offset).
    std::string preface;
    if (target.stacked() != target.pid) {
      preface += fmt::format("== worker {} runs Python in its descendant {}: the stacks below are its ==\n",
                             target.pid, target.python);
    }
    // Without py-spy, a worker with ddprun's bootstrap still has its faulthandler: what is
    // missing then is said after it was asked (hang_response.cpp).
    const bool python_missing = target.python != 0 && target.python_stacks.empty();
    if (const std::string missing = tools_.missing(python_missing); !missing.empty()) {
      preface += fmt::format("== {} ==\n", missing);
    }
    if (::write(file.get(), preface.data(), preface.size()) < 0) continue;
    std::string script;
    for (const std::string& tool : {tools_.native, target.python != 0 ? tools_.python : std::string()}) {
      if (tool.empty()) continue;
      const std::string command = with_pid(tool, target.stacked());
      script += fmt::format("echo \"== {} ==\"; {} 2>&1; echo; ", command, command);
    }
    if (script.empty()) continue;
    StartRequest request;
    request.argv = {"/bin/sh", "-c", script};
    request.environ = environ_;
    request.stdout_fd = file.get();
    request.stderr_fd = file.get();
    const SpawnResult spawned = spawn_process(request);
    if (spawned.pid > 0) running_.insert(spawned.pid);
  }
  if (running_.empty()) {
    tools_done();
    return true;
  }
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_)));
  timer_.async_wait([this](std::error_code ec) {
    if (ec) return;
    for (pid_t pid : running_) ::kill(-pid, SIGKILL);  // their exits are still reaped
    running_.clear();
    tools_done();
  });
  return true;
}

bool StackDumper::child_exited(pid_t pid) {
  if (running_.erase(pid) == 0) return false;
  if (running_.empty()) {
    timer_.cancel();
    tools_done();
  }
  return true;
}

void StackDumper::tools_done() {
  for (const auto& target : targets_) {
    if (target.python == 0 || target.python_stacks.empty()) continue;
    if (has_python_frames(read_file(target.file).value_or(""), target.stacked())) continue;  // py-spy's
    ask_faulthandler(target);
  }
  if (asked_.empty()) return finish();
  ask_deadline_ = std::chrono::steady_clock::now() + kFaulthandlerTimeout;
  poll_faulthandlers();
}

void StackDumper::ask_faulthandler(const Target& target) {
  const int sig = env::python_stacks_signal();
  const pid_t python = target.python;
  // Not caught: ddprun's bootstrap did not load in this interpreter (python -I, -E or -S, an
  // exec of another program); the signal's default action would end it.
  const auto masks = read_signal_masks(python, python);
  if (!masks || !catches(*masks, sig)) return;
  struct stat before {};
  const long long offset = ::stat(target.python_stacks.c_str(), &before) == 0 ? before.st_size : 0;
  // To the main thread: faulthandler marks the thread that took the signal as current, and the
  // summary shows the main thread's frames.
  if (::syscall(SYS_tgkill, python, python, sig) != 0) return;
  asked_.push_back({target, offset});
}

void StackDumper::poll_faulthandlers() {
  const int sig = env::python_stacks_signal();
  const bool late = std::chrono::steady_clock::now() >= ask_deadline_;
  for (auto it = asked_.begin(); it != asked_.end();) {
    const pid_t python = it->target.python;
    const auto masks = read_signal_masks(python, python);
    struct stat now {};
    const bool wrote = ::stat(it->target.python_stacks.c_str(), &now) == 0 && now.st_size > it->offset;
    // Gone, or done once it wrote: see handler_done().
    const bool done = !masks || (wrote && handler_done(*masks, sig));
    if (!done && !late) {
      ++it;
      continue;
    }
    std::string answer = fmt::format("{} of {} (signal {}, every thread) ==\n", kFaulthandlerHeader, python, sig);
    if (wrote) {
      std::string dumped = read_file(it->target.python_stacks).value_or("");
      answer += dumped.size() > static_cast<std::size_t>(it->offset) ? dumped.substr(it->offset) : "";
    }
    if (!done) {
      answer += fmt::format("== no whole answer in {:.0f} s (stopped, or in an uninterruptible wait) ==\n",
                            std::chrono::duration<double>(kFaulthandlerTimeout).count());
    }
    UniqueFd file(::open(it->target.file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    if (file && ::write(file.get(), answer.data(), answer.size()) < 0) {
      // the stacks file went with its folder (the round is over): nobody reads it
    }
    it = asked_.erase(it);
  }
  if (asked_.empty()) return finish();
  timer_.expires_after(kFaulthandlerPoll);
  timer_.async_wait([this](std::error_code ec) {
    if (!ec) poll_faulthandlers();
  });
}

void StackDumper::finish() {
  auto done = std::move(done_);
  done_ = nullptr;
  targets_.clear();
  if (done) done();
}

}  // namespace ddprun::launcher
