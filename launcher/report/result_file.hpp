// --result_file: the job's result as one JSON object, for the script around ddprun (a SLURM
// batch script, a Kubernetes job) to decide whether to requeue. Written at every exit, success
// included, atomically: a reader sees the whole file or none.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ddprun/rendezvous.hpp"
#include "report/health_check_end.hpp"

namespace ddprun::launcher {

// {"exit_code", "kind", "retryable", "message", "root_cause": {rank, local_rank, host, pid,
// exit_code, signal, kind, cause, exception, location, step} or null, "failures": [...],
// "stop_reason", "error", "signal", "attempt", "restarts", "max_restarts", "quarantined",
// "health_check": null}; record_exit() adds "snapshot_dir" and "goodput". `shutdown_signal`: the signal that stopped ddprun (0: none); `attempt`:
// this node's last attempt (0 first).
nlohmann::json job_result(const elastic::JobOutcome& outcome, int exit_code, int shutdown_signal, int attempt,
                          int max_restarts);

// A health check as the result file and the event log give it: {"command", "result" (passed,
// warning, failed), "exit_code" (null without one), "what", "seconds", "output": its last lines}.
nlohmann::json health_check_json(const HealthCheckReport& report);

// Writes `result` to `path` through a temporary file in the same folder and rename(2). Returns ""
// or what went wrong, naming the path.
std::string write_result_file(const std::string& path, const nlohmann::json& result);

}  // namespace ddprun::launcher
