#include "report/job_exit.hpp"

#include <fmt/format.h>

#include "ddprun/exit_codes.hpp"
#include "ddprun/system.hpp"
#include "report/event_records.hpp"
#include "report/failure_report.hpp"
#include "report/result_file.hpp"

namespace ddprun::launcher {

JobExit job_exit(const elastic::JobOutcome& outcome, int shutdown_signal, const std::string& program,
                 const HealthCheckReport* health) {
  JobExit e;
  if (!outcome.failures.empty()) e.root_cause = failure_view(outcome.failures.front());
  if (shutdown_signal != 0) {
    e.exit_code = exit_code::kSignalBase + shutdown_signal;
    e.console = fmt::format("ddprun: stopped by {}; workers stopped\n", signal_name(shutdown_signal));
    return e;
  }
  e.exit_code = outcome.exit_code;
  if (outcome.exit_code == exit_code::kQuarantined && !outcome.error.empty()) {
    e.console = fmt::format("ddprun: {}; exit {} so that the scheduler can drain this host\n", outcome.error,
                            e.exit_code);
    if (health != nullptr) e.console += health_check_output_text(*health);
    return e;
  }
  if (e.exit_code != 0) e.console = format_failure_summary(outcome, program);
  for (const auto& q : outcome.quarantined) {
    e.console += fmt::format("ddprun: quarantined during the job: {}: {}\n", q.node, q.why);
  }
  return e;
}

std::string record_exit(EventLog& events, const config::LaunchConfig& config, const elastic::JobOutcome& outcome,
                        int exit_code, int shutdown_signal, int attempt, const HealthCheckReport* health,
                        const std::string& snapshot_dir, const nlohmann::json& goodput) {
  if (!outcome.stop_reason.empty()) events.write(records::restart_stopped(outcome.stop_reason, outcome.restarts));
  events.write(records::exit(outcome, exit_code, shutdown_signal, snapshot_dir));
  if (config.result_file.empty()) return "";
  nlohmann::json result = job_result(outcome, exit_code, shutdown_signal, attempt, config.max_restarts);
  if (health != nullptr) result["health_check"] = health_check_json(*health);
  result["snapshot_dir"] = snapshot_dir.empty() ? nlohmann::json() : nlohmann::json(snapshot_dir);
  result["goodput"] = goodput;
  return write_result_file(config.result_file, result);
}

FailureView failure_view(const elastic::WorkerFailure& f) {
  return FailureView{f.rank, f.host, f.exit_code, f.kind.name(), f.retryable, f.cause};
}

}  // namespace ddprun::launcher
