// How ddprun ends: its exit code and what it says last, from the job's outcome and the shutdown
// signal that stopped it, if one did. Pure; tested as a table. record_exit() writes the exit
// record (event_records.hpp) and --result_file (result_file.hpp) from the same code.
#pragma once

#include <optional>
#include <string>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "output/event_log.hpp"
#include "report/health_check_end.hpp"
#include "report/status_view.hpp"

namespace ddprun::launcher {

struct JobExit {
  int exit_code = 0;
  std::string console;                     // the last lines, each ending in '\n'; "" for a success
  std::optional<FailureView> root_cause;   // the job's root cause, for the live view
};

// A shutdown signal N: 128+N ("stopped by SIGTERM; workers stopped"). A node quarantined: 71
// and why, so that the scheduler drains the host; by its own health check (`health`, the check that
// exited 1), the check's last lines too. Otherwise the outcome's code, with the failure summary
// when it is not 0, and the nodes quarantined during the job.
JobExit job_exit(const elastic::JobOutcome& outcome, int shutdown_signal, const std::string& program,
                 const HealthCheckReport* health = nullptr);

// What ddprun leaves besides its last lines: the event log's restart_stopped (when the restart
// policy ended the job) and exit records, and --result_file, with this node's last start
// `attempt`, when the node left because of it, the health check that exited 1, and the snapshot
// folder kept for a requeue (`snapshot_dir`; "": none kept), and the goodput ledger's figures
// (`goodput`, goodput_ledger.hpp's goodput_json(); null: none). Returns why the result file could not
// be written, "" when it was (or none is asked for).
std::string record_exit(EventLog& events, const config::LaunchConfig& config, const elastic::JobOutcome& outcome,
                        int exit_code, int shutdown_signal, int attempt, const HealthCheckReport* health = nullptr,
                        const std::string& snapshot_dir = "", const nlohmann::json& goodput = nullptr);

// The live view's account of a failure.
FailureView failure_view(const elastic::WorkerFailure& failure);

}  // namespace ddprun::launcher
