// What kind of failure a worker's end was (one of config/'s vocabulary, ddprun/failure_kind.hpp,
// or the user's own), and whether running the same code again can fix it: one pure function
// over what ddprun saw (exit status, signal, the @record error file, the last lines of standard
// error, the round cgroup's memory.events, the hang detector), with the user's --failure_rules
// first. The summary, the event log, /status, /metrics and --result_file all
// show the kind this gives; the restart policy (elastic/'s restart_policy.hpp) reads it.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/failure_kind.hpp"
#include "ddprun/failure_rules.hpp"

namespace ddprun::launcher {

// What ddprun saw of one failed worker.
struct FailureEvidence {
  int exit_code = 0;
  int signal = 0;                     // the signal that killed it, 0 when it exited
  bool signal_from_outside = false;   // a signal ddprun did not send
  bool hung = false;                  // judged hung by the hang detector
  bool stopped_by_ddprun = false;     // ddprun had already signalled it to stop
  bool after_another_failure = false; // another worker of the round had already failed
  std::string error_message;          // the error file's message ("Type: text"), or ddprun's
  std::string traceback;              // the error file's traceback
  std::vector<std::string> stderr_tail;  // its last standard error lines, oldest first
  // New oom_kill events in memory.events of the workers' cgroup during the round; nullopt
  // where ddprun has no cgroup (or cannot read the file).
  std::optional<long long> oom_kills;
  std::optional<long long> memory_peak;  // memory.peak of that cgroup, bytes, where known
  // New out-of-memory kills the kernel counted on the whole host during the round (/proc/vmstat's
  // oom_kill); nullopt where it does not count them (before Linux 4.13). Asked where there is no
  // cgroup to tell: none means that a SIGKILL from outside was not the OOM killer's.
  std::optional<long long> kernel_oom_kills;
};

struct Classification {
  FailureKindName kind;   // one of ddprun's, or a --failure_rules kind
  bool retryable = true;
  std::string cause;      // one line: "torch.OutOfMemoryError: CUDA out of memory. ...", "SIGSEGV", ...
  std::string exception;  // the Python exception's type, when one was seen
  std::string location;   // "file.py:12" where it was raised (the innermost frame), when seen
  std::string rule;       // the --failure_rules pattern that decided, if one did
};

// The kind of the failure `e` describes. Rules in order, the first that applies decides:
// the user's rules; hang; consequence (after another failure, a peer's closed connection);
// syntax_error; import_error; cuda_oom; nccl_error; collective_timeout; consequence (stopped by
// ddprun after another failure, with no error of its own); then by signal: host_oom (SIGKILL from outside: certain with a cgroup's oom_kill, "probably"
// without a cgroup), segfault, abort, killed; a Python exception; exit_code.
Classification classify_failure(const FailureEvidence& e, const std::vector<config::FailureRule>& rules);

// Whether one of `lines` says that a peer's connection closed under the worker ("Connection
// reset by peer", ...): what a rank sees when another died first.
bool mentions_lost_peer(const std::deque<std::string>& lines);

// The Python exception a worker's stderr or error-file traceback ends with: its type, message
// and the innermost `File "...", line N` before it. Lines may carry PyTorch's "[rankN]:" prefix.
struct PythonError {
  std::string type;      // e.g. "ZeroDivisionError", "torch.cuda.OutOfMemoryError"
  std::string line;      // the whole "Type: message" line
  std::string location;  // "x.py:3", or "" when no frame precedes it
};
std::optional<PythonError> find_python_error(const std::vector<std::string>& lines);

}  // namespace ddprun::launcher
