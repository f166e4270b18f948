// The warm interpreter (zygote) of --warm_start: one Python process per node that has
// imported torch, torch.distributed, torch._dynamo (where torch has it) and --preload's modules, from which Python workers are
// forked instead of started cold, so that a restart does not pay `import torch` again.
//
// The process: `PYTHON -u <share/ddprun/python>/_ddprun_zygote.py FD MODULES`, started by
// spawn_process() like a worker (its own process group, SIGKILL when ddprun dies, the file
// limit ddprun was started with) but in ddprun's cgroup, not a round's: the end of a round kills
// the round's cgroup, not the zygote. FD is its end of a Unix stream socket pair; ddprun keeps
// the other. Its environment is the workers' without what differs by rank (worker_environment.hpp's
// zygote_environment()): what torch reads at import (OMP_NUM_THREADS, TORCH_CPP_LOG_LEVEL...) is
// set before the import.
//
// The protocol, messages framed as a 4-byte little-endian length and that many bytes:
//   zygote -> ddprun, once: "ready", or "failed WHY" (then it exits).
//   ddprun -> zygote: a fork request (encode_fork_request() of a StartRequest), with the worker's stdin, stdout,
//     stderr and the round's cgroup.procs (when there is one) as SCM_RIGHTS on its first bytes.
//   zygote -> ddprun: "pid N", or "refused WHY" (CUDA was initialised or it has a thread: it
//     exits, poisoned), or "error WHY".
// The zygote forks a child that forks the worker and exits; the zygote reaps the child, so the
// worker is re-parented to ddprun (PR_SET_CHILD_SUBREAPER, main.cpp) before "pid N" is sent, and
// only then lets the worker go on. ddprun reaps workers only on its event loop, after
// fork_worker() returned: a worker that ends at once is reaped after its pid is known.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/unique_fd.hpp"
#include "process/start_request.hpp"

namespace ddprun::launcher {

// How long fork_worker() waits for the zygote's answer: a fork of an interpreter that imported
// torch takes 5 to 15 ms here; a zygote that takes longer is stuck, and is replaced.
inline constexpr std::chrono::seconds kZygoteAnswerLimit{5};

// The request's bytes as the zygote reads them: NUL-separated fields
// KIND ("script"|"module"), CWD, DDPRUN_PID, CPUS ("0,1,5" or ""), START_BY (nanoseconds of
// CLOCK_MONOTONIC, as Python's time.monotonic_ns(), or ""), N, N argv entries, M, M environment
// entries. `request.argv` is worker_argv()'s `PYTHON -u [-m] PROGRAM ARGS` (start_request.hpp):
// KIND is "module" with -m, and the argv entries are PROGRAM ARGS. `cwd` is the worker's folder.
std::string encode_fork_request(const StartRequest& request, const std::string& cwd, pid_t ddprun);

class Zygote {
 public:
  enum class State { kImporting, kReady, kGone };

  // Starts the zygote of `python` (the workers' interpreter) from `script` (_ddprun_zygote.py)
  // with `environ`, preloading `preload` (comma-separated) after torch; `background`: its
  // imports at nice 19 where it can take its priority back (hurry()). Before its imports it
  // compiles `compile_first` (the .py PROGRAM; "" for none) and fails at once if that does not
  // compile, so that a SyntaxError's workers start cold and fail at once rather than after the
  // import of torch. nullptr when it cannot be started, with `why` set.
  static std::unique_ptr<Zygote> start(const std::string& python, const std::string& script,
                                       const std::vector<std::string>& environ, const std::string& preload,
                                       const std::string& compile_first, bool background, std::string& why);
  ~Zygote();  // its socket closed (it exits on its own) and SIGKILL, should it not have
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  pid_t pid() const { return pid_; }
  State state() const { return state_; }
  // Why it is gone: "it died (killed by SIGKILL)", "importing torch failed: ...".
  const std::string& why_gone() const { return why_gone_; }
  // True when it said its imports failed (or left it unfit to fork): a new one would too.
  bool import_failed() const { return import_failed_; }
  // Readable once its first message (or its end) is there, while it is importing.
  int fd() const { return socket_.get(); }
  // Takes its first message if it came, without waiting: kImporting until then.
  State poll();

  // Forks a worker of `request` in the folder `cwd`, with the request's stdout, stderr,
  // cgroup_procs_fd and ddprun's stdin: its pid, or -1 when it could not (the zygote is then
  // gone, why_gone() says why). Waits at most kZygoteAnswerLimit. Call only in kReady.
  pid_t fork_worker(const StartRequest& request, const std::string& cwd);
  // Tells a zygote that imports in the background to go on at the workers' priority (workers
  // wait for it). Nothing once it is ready or gone.
  void hurry();
  // ddprun reaped it, with this wait status.
  void exited(int status);

 private:
  Zygote(pid_t pid, UniqueFd socket) : pid_(pid), socket_(std::move(socket)) {}
  void gone(std::string why);
  // One message; "" with why_gone() set when it could not be read by `deadline`.
  std::string receive(std::chrono::steady_clock::time_point deadline);

  pid_t pid_;
  bool reaped_ = false;
  UniqueFd socket_;
  State state_ = State::kImporting;
  std::string why_gone_;
  bool import_failed_ = false;
};

}  // namespace ddprun::launcher
