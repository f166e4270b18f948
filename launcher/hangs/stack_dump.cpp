#include "hangs/stack_dump.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

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

StackTools find_stack_tools(const std::string& path, bool python_workers, const std::string& python) {
  StackTools t;
  if (!find_program("eu-stack", path).path.empty()) {
    t.native = "eu-stack -p {pid}";
  } else if (!find_program("gdb", path).path.empty()) {
    t.native = "gdb -p {pid} -batch -nx -q -ex 'thread apply all bt'";
  } else {
    t.missing = "no native stacks: neither eu-stack (apt install elfutils) nor gdb is installed";
  }
  if (python_workers) {
    std::string py_spy = find_program("py-spy", path).path;
    const std::string python_path = python.find('/') != std::string::npos ? python : find_program(python, path).path;
    if (py_spy.empty() && !python_path.empty()) {
      py_spy = find_program((std::filesystem::path(python_path).parent_path() / "py-spy").string(), path).path;
    }
    if (!py_spy.empty()) {
      t.python = "'" + py_spy + "' dump --pid {pid}";
    } else {
      t.missing += fmt::format("{}no Python stacks: py-spy is not in PATH or next to {} (pip install py-spy)",
                               t.missing.empty() ? "" : "; ", python);
    }
  }
  return t;
}

std::vector<std::string> top_frames(const std::string& stacks, pid_t pid, int n) {
  // py-spy: 'Thread 123 (idle): "MainThread"' then indented frames; eu-stack: "TID 123:" then
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
        main_thread = line.find("\"MainThread\"") != std::string::npos;
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
    std::string script;
    for (const std::string& tool : {tools_.native, tools_.python}) {
      if (tool.empty()) continue;
      const std::string command = with_pid(tool, target.pid);
      script += fmt::format("echo \"== {} ==\"; {} 2>&1; echo; ", command, command);
    }
    if (!tools_.missing.empty()) script += fmt::format("echo \"== {} ==\"", tools_.missing);
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
