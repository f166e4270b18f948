#include "hangs/stack_dump.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "ddprun/text.hpp"
#include "process/spawn.hpp"
#include "process/unique_fd.hpp"

namespace ddprun::launcher {
namespace {

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

std::vector<std::string> top_frames(const std::string& stacks, pid_t pid, int n) {
  // py-spy: 'Thread 123 (idle): "MainThread"' (0.4: 'Thread 123 (idle)') then indented frames; eu-stack: "TID 123:" then
  // "#0  0x... name"; gdb: 'Thread 1 (Thread 0x... (LWP 123) "name"):' then "#0  0x... in name ()".
  std::vector<std::string> python, native;
  std::istringstream in(stacks);
  std::string line;
  enum { kNone, kPython, kNative } section = kNone;
  bool main_thread = false;
  const std::string tid = std::to_string(pid);
  while (std::getline(in, line)) {
    if (line.rfind("== ", 0) == 0) {
      section = line.find("py-spy") != std::string::npos ? kPython : kNative;
      main_thread = false;
      continue;
    }
    if (section == kPython) {
      if (line.rfind("Thread ", 0) == 0) {
        // py-spy 0.3 names the thread; 0.4 gives its id only (the process's own id for the main one).
        main_thread = line.find("\"MainThread\"") != std::string::npos || line.rfind("Thread " + tid + " ", 0) == 0;
      } else if (main_thread && line.rfind("    ", 0) == 0 && static_cast<int>(python.size()) < n) {
        python.push_back(std::string(trim_left(line, " \t")));
      }
    } else if (section == kNative) {
      if (line.rfind("TID ", 0) == 0) {
        main_thread = line == "TID " + tid + ":";
      } else if (line.rfind("Thread ", 0) == 0) {
        main_thread = line.find("(LWP " + tid + ")") != std::string::npos;
      } else if (main_thread && line.rfind("#", 0) == 0 && static_cast<int>(native.size()) < n) {
        std::istringstream fields(line);
        std::string number, address, rest;
        fields >> number >> address;
        std::getline(fields, rest);
        rest = std::string(trim_left(rest, " \t"));
        if (rest.rfind("in ", 0) == 0) rest = rest.substr(3);
        native.push_back(rest.empty() ? address : rest);
      }
    }
  }
  return python.empty() ? native : python;
}

StackDumper::StackDumper(asio::io_context& io, StackTools tools, std::vector<std::string> environ,
                         double timeout_seconds)
    : tools_(std::move(tools)), environ_(std::move(environ)), timeout_(timeout_seconds), timer_(io) {}

bool StackDumper::dump(const std::vector<Target>& targets, std::function<void()> done) {
  if (busy()) return false;
  done_ = std::move(done);
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
    if (const std::string missing = tools_.missing(target.python != 0); !missing.empty()) {
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
    SpawnRequest request;
    request.argv = {"/bin/sh", "-c", script};
    request.environ = environ_;
    request.stdout_fd = file.get();
    request.stderr_fd = file.get();
    const SpawnResult spawned = spawn_process(request);
    if (spawned.pid > 0) running_.insert(spawned.pid);
  }
  if (running_.empty()) {
    finish();
    return true;
  }
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_)));
  timer_.async_wait([this](std::error_code ec) {
    if (ec) return;
    for (pid_t pid : running_) ::kill(-pid, SIGKILL);  // their exits are still reaped
    running_.clear();
    finish();
  });
  return true;
}

bool StackDumper::child_exited(pid_t pid) {
  if (running_.erase(pid) == 0) return false;
  if (running_.empty()) {
    timer_.cancel();
    finish();
  }
  return true;
}

void StackDumper::finish() {
  auto done = std::move(done_);
  done_ = nullptr;
  if (done) done();
}

}  // namespace ddprun::launcher
