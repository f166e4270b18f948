// Python stacks without py-spy. ddprun's bootstrap (python_bootstrap/sitecustomize.py) registers Python's
// faulthandler in each Python worker on env::python_stacks_signal() (ddprun/worker_env.hpp), to
// write every thread's Python stack to the worker's own file (DDPRUN_PYTHON_STACKS_FILE): from a
// C signal handler, without the GIL, so a worker stuck in C code answers as well as one stuck in
// Python. ddprun sends the signal only where py-spy is absent or gave no Python stack
// (stack_dump.hpp), only to a process that catches it, and tells from the thread's signal masks
// when the handler has run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

// One thread's signal state, as /proc/PID/task/TID/status shows it (bit N-1 is signal N).
struct SignalMasks {
  std::uint64_t pending = 0;  // SigPnd: sent to this thread, not yet taken
  std::uint64_t blocked = 0;  // SigBlk: a handler blocks its own signal while it runs
  std::uint64_t caught = 0;   // SigCgt: the process has a handler installed
};
// nullopt when a field is missing (not a status file).
std::optional<SignalMasks> parse_signal_masks(std::string_view status);
// nullopt when the thread is gone.
std::optional<SignalMasks> read_signal_masks(pid_t pid, pid_t tid);

// The thread would run a handler for `sig` now: one is installed and the thread does not block it.
bool catches(const SignalMasks& masks, int sig);
// `sig`, sent to the thread, is neither waiting nor in its handler. Once the handler has written
// something, this says it is done: faulthandler's handler blocks its own signal while it runs (it
// registers without SA_NODEFER), and before it runs the signal is pending, except for the moment
// the kernel sets up the handler's frame, when nothing has been written yet.
bool handler_done(const SignalMasks& masks, int sig);

// One frame of faulthandler's dump ('  File "x.py", line 3 in stuck') in py-spy's form, as the
// hang summary shows frames ("stuck (x.py:3)"); nullopt for another line.
std::optional<std::string> faulthandler_frame(std::string_view line);

}  // namespace ddprun::launcher
