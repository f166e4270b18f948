// Where a hung job is stuck: the native stack of every thread of each worker (elfutils' eu-stack,
// else gdb in batch mode) and, for workers that run Python, the Python stack of every thread
// (py-spy), collected by tool processes that run alongside the event loop, one file per worker.
// Where py-spy is absent or gave no Python stack (it cannot attach: no ptrace rights), the Python
// stacks come from the worker's faulthandler, which ddprun's bootstrap registered
// (python_stacks.hpp), once the tools are done: a process a tool has stopped with ptrace would
// not take the signal.
// A worker runs Python when its program is an interpreter, whatever started it (a .py PROGRAM,
// --no_python python3, a shell script that execs python or starts it as a child): the stacks are
// then those of that Python process.
#pragma once

#include <sys/types.h>

#include <chrono>
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
  std::string native;          // "" when neither eu-stack nor gdb is installed
  std::string python;          // "" when py-spy is not found
  std::string native_missing;  // why there are no native stacks and how to get them; "" when there are
  std::string python_missing;  // the same for Python stacks, which only Python workers need
  // What the stacks of a worker lack ("" when nothing), `python`: whether it runs Python.
  std::string missing(bool python) const;
};
// Looks eu-stack and gdb up in `path`; py-spy first at each of `py_spy_first` (paths of a
// py-spy: the one the pip package brought, beside ddprun, next to the workers' Python), then in
// `path`.
StackTools find_stack_tools(const std::string& path, const std::vector<std::string>& py_spy_first);

// Where py-spy may be, before PATH, in order: `setting` (DDPRUN_PY_SPY: the pip-installed ddprun
// sets it to the py-spy its package depends on), beside ddprun's own executable, and next to
// `python`, the workers' interpreter (looked up in `path` when it has no '/'; a virtual
// environment's bin/).
std::vector<std::string> py_spy_places(const std::string& setting, const std::string& python, const std::string& path);

// The `n` innermost frames of the main thread (the thread whose id is `pid`) in a file that
// stack_dump wrote: the Python frames when there are some (py-spy's, else faulthandler's), else
// the native ones. Empty if none.
std::vector<std::string> top_frames(const std::string& stacks, pid_t pid, int n);
// Whether such a file holds a Python stack of the main thread.
bool has_python_frames(const std::string& stacks, pid_t pid);

class StackDumper {
 public:
  struct Target {
    int rank = 0;
    pid_t pid = 0;      // the worker
    std::string file;   // written whole: "== <tool command> ==" then its output, for each tool
    pid_t python = 0;   // the Python interpreter the worker runs (process_tree.hpp's python_process()), 0: none
    std::string python_stacks;  // where its faulthandler writes (DDPRUN_PYTHON_STACKS_FILE); "": no bootstrap
    // Whose stacks are taken: the Python process (the worker itself, or a descendant when the
    // worker is a shell that runs python), else the worker.
    pid_t stacked() const { return python != 0 ? python : pid; }
  };

  StackDumper(asio::io_context& io, StackTools tools, std::vector<std::string> environ,
              double timeout_seconds);

  // Starts one tool process per target (py-spy for those that run Python), then, once they
  // ended or the timeout passed (the stragglers are killed), asks the faulthandler of each
  // Python target without a Python stack yet; `done` runs on the event loop after that. One dump
  // at a time: false if one is running.
  bool dump(const std::vector<Target>& targets, std::function<void()> done);
  // A child ended: true when it was one of the dump's tool processes.
  bool child_exited(pid_t pid);
  bool busy() const { return !running_.empty() || !asked_.empty(); }
  const StackTools& tools() const { return tools_; }

 private:
  // A faulthandler asked for its stacks: its output past `offset` of its file is the answer.
  struct Asked {
    Target target;
    long long offset = 0;
  };
  void tools_done();
  void ask_faulthandler(const Target& target);
  void poll_faulthandlers();
  void finish();

  StackTools tools_;
  std::vector<std::string> environ_;
  double timeout_;
  asio::steady_timer timer_;
  std::set<pid_t> running_;
  std::vector<Target> targets_;
  std::vector<Asked> asked_;
  std::chrono::steady_clock::time_point ask_deadline_;
  std::function<void()> done_;
};

}  // namespace ddprun::launcher
