// What went wrong, in words: worker failures from exit statuses and error files, and the
// summary ddprun prints when the job fails.
#pragma once

#include <optional>
#include <string>

#include "ddprun/rendezvous.hpp"

namespace ddprun::launcher {

// "SIGSEGV" for 11; "signal 64" when the system has no name for it.
std::string signal_name(int signal);

// The message and time a worker left in its TORCHELASTIC_ERROR_FILE (PyTorch's @record JSON:
// {"message": {"message": "...", "extraInfo": {"py_callstack": ..., "timestamp": "..."}}}).
struct ErrorFileContents {
  std::string message;
  std::string traceback;
  double timestamp = 0;
};
std::optional<ErrorFileContents> read_error_file(const std::string& path);

// The job's failure summary, several lines ending in '\n': the root cause (rank, local rank,
// host, pid, exit code or signal with a hint, the worker's own message), then each other
// failure on one line.
std::string format_failure_summary(const elastic::JobOutcome& outcome, const std::string& program);

// One line describing how a worker ended, e.g. "exit code 3" or "killed by SIGSEGV (exit code 139)".
std::string describe_end(const elastic::WorkerFailure& failure);

}  // namespace ddprun::launcher
