// The --event_log records the agent writes, one function a record: its name and its fields,
// pure, so that the log's format (public API: the manual's "Event log" reference) is read and
// tested in one place. EventLog (event_log.hpp) adds time, node, group_rank and attempt.
// The hang response's own records (hang_found, stacks, ...) are in hangs/hang_response.cpp.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "output/event_log.hpp"
#include "report/health_check_end.hpp"

namespace ddprun::launcher {

namespace records {

EventRecord started(const config::LaunchConfig& config);
// --chaos injected a fault (`kind`: kill, hang, node) into the worker `pid` (0: a node fault, this
// ddprun) of `rank`, due at `due` and made at `at` (seconds since ddprun's start).
EventRecord chaos_fault(const std::string& kind, int rank, int local_rank, pid_t pid, double due, double at);
EventRecord round_started(const elastic::RoundAssignment& round);
EventRecord restart(const elastic::RoundAssignment& round, int max_restarts);
// The job was not restarted: the policy's reason (JobOutcome::stop_reason).
EventRecord restart_stopped(const std::string& stop_reason, int restarts);
EventRecord stop_requested(int round, const std::string& why);
// `forked`: seconds since the epoch when ddprun forked it (a ddprun stopped in between writes the
// record later); 0: not given.
// `warm`: forked from the warm interpreter (--warm_start), not started cold.
EventRecord worker_started(int rank, int local_rank, pid_t pid, double forked = 0, bool warm = false);
// `signal`: the signal that ended it, 0 when it exited.
EventRecord worker_exited(int rank, int local_rank, pid_t pid, int exit_code, int signal, bool stopped_by_ddprun);
// A failure once its kind is known.
EventRecord worker_failed(const elastic::WorkerFailure& failure);
EventRecord round_ended(int round);
// The files of the snapshot folder that the end of `round` removed, as (path, why: what is known of
// why it was not committed) (snapshots/commit_index.hpp).
EventRecord snapshots_removed(int round, const std::vector<std::pair<std::string, std::string>>& files);
EventRecord spare(int place, const std::string& why);
EventRecord quarantined(const elastic::QuarantinedNode& node);
// A --health_check ended: result_file.hpp's health_check_json().
EventRecord health_check(const HealthCheckReport& report);
EventRecord signal_received(int signal);
EventRecord signal_forwarded(int signal, bool forwarded);
EventRecord quiet(int rank, int local_rank, double silent_for, std::optional<long long> last_step);
EventRecord hang_timeout_learned(double timeout);
// A rank judged hung: how long it was silent against which timeout, its last step, and `why`
// (its failure's message).
EventRecord hang(int rank, int local_rank, pid_t pid, double silent_for, double hang_timeout,
                 std::optional<long long> last_step, const std::string& why);
// torchelastic's file timer of `pid` expired.
EventRecord timer_expired(pid_t pid, const std::string& scope_id, int signal);
// A worker's stacks collected; `file`: where they are kept, "" when nowhere after ddprun exits.
EventRecord stacks_written(int rank, pid_t pid, const std::string& file);
EventRecord heartbeats_missing(double after);
// A rank's progress (report/progress_samples.hpp samples its beats): its step (none: the worker
// tells none) and the beats ddprun saw of it since its workers of the round started.
EventRecord progress(int rank, int local_rank, std::optional<long long> step, long long beats);
// A dying gasp ended (--snapshot_signal, launcher/snapshots/dying_gasp.hpp): the signal, the
// ranks signalled, the files and bytes written in the snapshot folder since the signal, the
// seconds from the signal to the last of them (`last_write`; none: nothing written) and to the
// gasp's end, what ended it (`ended`: dying_gasp.hpp's words) and how many signalled workers
// were still running then.
EventRecord dying_gasp(int signal, const std::vector<int>& ranks, unsigned long long files, unsigned long long bytes,
                       std::optional<double> last_write, double seconds, const std::string& ended, int still_running);
// The snapshot folder's restore before this node's workers of a round started (elastic's
// SnapshotReplication): files fetched from other nodes, removals applied, bytes, seconds, and what
// was said (lost versions, nodes that did not answer).
EventRecord snapshot_restore(int round, std::size_t fetched, std::size_t removed, std::uint64_t bytes, double seconds,
                             const std::vector<std::string>& lines);
// The last record: ddprun's exit code, the signal that stopped it, the root cause, the error, and
// the snapshot folder kept for a requeue (`snapshot_dir`, "": none; the field only when kept).
EventRecord exit(const elastic::JobOutcome& outcome, int exit_code, int shutdown_signal,
                 const std::string& snapshot_dir = "");

}  // namespace records
}  // namespace ddprun::launcher
