// Where a hung job is stuck: the native stack of every thread of each worker (elfutils' eu-stack,
// else gdb in batch mode) and, for Python workers, the Python stack of every thread (py-spy),
// collected by tool processes that run alongside the event loop, one file per worker.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <asio/steady_timer.hpp>

namespace ddprun::launcher {

// The tools found on this machine, as shell commands with "{pid}" in them.
struct StackTools {
  std::string native;    // "" when neither eu-stack nor gdb is installed
  std::string python;    // "" when the workers are not Python, or py-spy is not found
  std::string missing;   // what the dumps lack and how to get it, "" when nothing
};
// Looks the tools up in `path`; py-spy also next to `python` (a virtual environment's bin/).
StackTools find_stack_tools(const std::string& path, bool python_workers, const std::string& python);

// The `n` innermost frames of the main thread (the thread whose id is `pid`) in a file that
// stack_dump wrote: the Python frames when there are some, else the native ones. "" if none.
std::vector<std::string> top_frames(const std::string& stacks, pid_t pid, int n);

class StackDumper {
 public:
  struct Target {
    int rank = 0;
    pid_t pid = 0;
    std::string file;   // written whole: "== <tool command> ==" then its output, for each tool
  };

  StackDumper(asio::io_context& io, StackTools tools, std::vector<std::string> environ,
              double timeout_seconds);

  // Starts one tool process per target; `done` runs on the event loop when all ended or the
  // timeout passed (the stragglers are killed). One dump at a time: false if one is running.
  bool dump(const std::vector<Target>& targets, std::function<void()> done);
  // A child ended: true when it was one of the dump's tool processes.
  bool child_exited(pid_t pid);
  bool busy() const { return !running_.empty(); }
  const StackTools& tools() const { return tools_; }

 private:
  void finish();

  StackTools tools_;
  std::vector<std::string> environ_;
  double timeout_;
  asio::steady_timer timer_;
  std::set<pid_t> running_;
  std::function<void()> done_;
};

}  // namespace ddprun::launcher
