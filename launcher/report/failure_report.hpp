// What went wrong, in words: worker failures from exit statuses and error files, and the
// summary ddprun prints when the job fails.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "ddprun/rendezvous.hpp"
#include "report/failure_classifier.hpp"

namespace ddprun::launcher {

// The message and time a worker left in its TORCHELASTIC_ERROR_FILE (PyTorch's @record JSON:
// {"message": {"message": "...", "extraInfo": {"py_callstack": ..., "timestamp": "..."}}}).
struct ErrorFileContents {
  std::string message;
  std::string traceback;
  double timestamp = 0;
};
std::optional<ErrorFileContents> read_error_file(const std::string& path);

// At most this many lines of a worker's traceback travel and are shown: the last ones, nearest
// the error.
inline constexpr int kTracebackLines = 40;
// A longer traceback line is cut, so that one huge line (a tensor printed in an exception
// message) cannot flood the summary or the rendezvous messages that carry it.
inline constexpr std::size_t kTracebackLineChars = 400;

// The last `max_lines` lines of `traceback`, without a final newline, each cut to
// kTracebackLineChars; when earlier lines were left out, a first line says how many.
std::string traceback_tail(const std::string& traceback, int max_lines = kTracebackLines);

// Fills `failure` from the error file at `path`, if the worker wrote one: its message, the tail
// of its traceback, and `path` itself only when `kept`, i.e. when the file lies in a log folder
// that outlives ddprun. Otherwise it lies in ddprun's private folder, deleted when ddprun exits,
// and the summary shows its contents rather than a path that will be gone.
void add_error_file(elastic::WorkerFailure& failure, const std::string& path, bool kept);

// What ddprun saw of a failed worker, as far as `failure` holds it (its exit, signal, hang, error
// file); the caller adds the worker's stderr tail and the round's memory events.
FailureEvidence evidence_of(const elastic::WorkerFailure& failure, bool stopped_by_ddprun, bool after_another_failure);
// Gives `failure` the kind, retryability, cause, exception and location of `c`.
void set_kind(elastic::WorkerFailure& failure, const Classification& c);

// The console line of a restart the coordinator made (`round`'s restart_count > 0): "ddprun:
// restarting workers (restart 2 of 5): after rank 3 on node7: ...", or for a restart for nodes
// joining or leaving, which has no reason, "(restart 2 of 5)" with --max_restarts.
std::string restart_announcement(const elastic::RoundAssignment& round, int max_restarts);

// A Python worker could not import a module: most often ddprun ran another Python than the one
// the user installed the module into (a venv, conda), so the message names the one it ran
// (`python`, the path found, and how it was chosen).
std::string import_failure_message(const std::string& import_error, const std::string& message,
                                   const std::string& python, const std::string& chosen_by);

// The job's failure summary, several lines ending in '\n': the root cause (rank, local rank,
// host, pid, exit code or signal with a hint, the first line of the worker's own message, the
// tail of its traceback indented under it, its error file when kept), then each other failure
// on one line.
std::string format_failure_summary(const elastic::JobOutcome& outcome, const std::string& program);

}  // namespace ddprun::launcher
