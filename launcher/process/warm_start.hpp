// --warm_start=on: which Python workers are forked from the zygote (zygote.hpp) and which start
// cold, and the zygote's life: started with ddprun, before the rendezvous completes, so that its
// `import torch` overlaps the wait for the other nodes; replaced when it dies (at most
// kZygoteReplacements times a run), while the workers of that start start cold.
//
// Only a .py PROGRAM or `-m MODULE` is forked (worker_argv() is `python -u [-m] PROGRAM`): an
// interpreter named as PROGRAM has options of its own, and --debug keeps its one worker in the
// foreground of the terminal. Whenever a start of Python workers is cold with warm start on,
// one line says why, once per start of the workers; other programs start as always, silently.
//
// While the zygote imports, a start of the workers waits for it rather than starting cold
// (when_ready()), for at most kZygoteImportWait: a cold worker would import the same modules from the beginning, on the
// same CPUs, while the zygote is some way through, so waiting is never slower than starting cold,
// and it leaves the CPUs to the import that will serve every later restart.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/launch_config.hpp"
#include "process/zygote.hpp"

namespace asio {
class io_context;
}

namespace ddprun::launcher {

// How often a zygote that died is replaced in one run: past that, warm start is off for the run.
inline constexpr int kZygoteReplacements = 3;
// The longest the workers' start waits for the zygote's imports (a `import torch` of 11 to 22 s
// is reported in containers on shared file systems).
inline constexpr std::chrono::seconds kZygoteImportWait{120};

class WarmStart {
 public:
  // `python`: the workers' interpreter; `environ`: the zygote's (zygote_environment()).
  // `script`: _ddprun_zygote.py, "" when it is not installed. Says once why warm start is off when
  // it was asked for and cannot apply.
  WarmStart(const config::LaunchConfig& config, std::string python, std::vector<std::string> environ,
            std::string script);
  ~WarmStart();

  bool enabled() const { return enabled_; }
  // Starts the zygote (call before any thread starts: ddprun's start).
  void begin();
  // The zygote's socket while it imports (readable when it is ready or gone), else -1.
  int importing_fd();
  // Calls `ready` when the workers may start: at once, unless the zygote still imports; then on
  // `io`'s loop once it is ready or gone, or kZygoteImportWait has passed. The loop goes on
  // meanwhile. A new wait replaces one still pending.
  void when_ready(asio::io_context& io, std::function<void()> ready);
  // Ends a wait of when_ready() without calling its `ready` (the workers are stopped before they
  // started); nothing when none is pending.
  void cancel_wait();
  // A new start of the workers: the next cold start says why again.
  void start_round() { said_this_round_ = false; }
  // A worker forked from the zygote, in ddprun's folder: its pid; -1: start it cold (said once a
  // start).
  pid_t fork(const StartRequest& request);
  // True when `pid`, which ddprun reaped with `status`, was the zygote.
  bool reaped(pid_t pid, int status);
  pid_t zygote_pid() const { return zygote_ ? zygote_->pid() : -1; }

 private:
  void cold(const std::string& why);
  void replace();

  struct Wait;  // when_ready()'s: the zygote's socket and a timer, on the loop

  const config::LaunchConfig& config_;
  std::string python_;
  std::vector<std::string> environ_;
  std::string script_;
  std::string cwd_;  // ddprun's, which a cold worker inherits and a forked one is given
  bool enabled_ = false;
  std::unique_ptr<Zygote> zygote_;
  int replacements_ = 0;
  bool said_this_round_ = false;
  std::unique_ptr<Wait> wait_;
  int waits_ = 0;  // a wait's handlers act only for their own wait
};

}  // namespace ddprun::launcher
