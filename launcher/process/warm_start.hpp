// --warm_start: which Python workers are forked from the zygote (zygote.hpp) and which start
// cold, and the zygote's life.
//
// on: the zygote starts with ddprun, before the rendezvous completes, so that its `import torch`
// overlaps the wait for the other nodes, and every start of the workers is forked from it.
// auto (the default): the first start is cold, as without warm start, and the zygote starts once
// the first workers made progress (their first beat: torch imported, the model built and
// stepping), or when the node becomes a hot spare (its first start is a later round's), only
// where a later start may come (LaunchConfig::may_restart()). Its imports run at
// nice 19 where it can take that back (_ddprun_zygote.py), beside the training rather than
// instead of it; a restart is forked from it. Either way a zygote that dies is replaced (at most
// kZygoteReplacements times a run), while the workers of that start start cold.
//
// Only a .py PROGRAM or `-m MODULE` is forked (worker_argv() is `python -u [-m] PROGRAM`): an
// interpreter named as PROGRAM has options of its own, and --debug keeps its one worker in the
// foreground of the terminal. With on, whenever a start of Python workers is cold, one line says
// why, once per start; auto says only what ends warm start for the run (its zygote failed);
// other programs start as always, silently.
//
// While the zygote imports, a start of the workers waits for it rather than starting cold
// (when_ready()), for at most kZygoteImportWait, and tells one at nice 19 to go on at the
// workers' priority: a cold worker would import the same modules from the beginning, on the same
// CPUs, while the zygote is some way through, so waiting is never slower than starting cold, and
// it leaves the CPUs to the import that will serve every later restart.
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
  // `script`: _ddprun_zygote.py, "" when it is not installed. With on, says once why warm start
  // is off when it cannot apply.
  WarmStart(const config::LaunchConfig& config, std::string python, std::vector<std::string> environ,
            std::string script);
  ~WarmStart();

  bool enabled() const { return enabled_; }
  // on: starts the zygote (call at ddprun's start, before the rendezvous).
  void begin();
  // True while the zygote waits for the workers' first beat (auto): the beats must be watched.
  bool waits_for_progress() const { return enabled_ && mode_ == Mode::kAuto && !begun_; }
  // A worker beat: auto starts the zygote at the first (in the background, see above).
  void workers_progressed();
  // This node waits as a hot spare: its first workers will start in a later round of a job that
  // is training, as a restart's do, so auto starts the zygote now (at nice 19, on a node that
  // runs nothing else) and the spare's workers are forked when it takes a lost node's place.
  void waits_as_spare();
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

  using Mode = config::LaunchConfig::WarmStart;

  const config::LaunchConfig& config_;
  Mode mode_;
  bool begun_ = false;  // the first zygote was started
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
