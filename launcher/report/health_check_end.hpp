// The verdict on how a --health_check ended (as worker_end.hpp's on a worker): exit 0 joins the
// round; exit 1 makes the node leave the job as quarantined (exit 71), as NVIDIA's node health
// checks and Slurm's HealthCheckProgram drain a node; anything else (another exit code, a signal,
// its deadline, a check that could not start) is the check's own trouble, not the node's: one
// warning, and the node joins. Pure; tested as a table. And what the summary, the result file and
// the event log say of a check.
#pragma once

#include <string>
#include <vector>

namespace ddprun::launcher {

// What ddprun knows of a health check that ended.
struct HealthCheckEnd {
  int wait_status = 0;     // from waitpid()
  bool timed_out = false;  // ddprun killed its process group at --health_check_timeout
  int start_error = 0;     // errno when it could not start (wait_status then means nothing)
};

enum class HealthAction { kJoin, kWarnAndJoin, kQuarantine };

struct HealthCheckVerdict {
  HealthAction action = HealthAction::kJoin;
  // How it ended, as a clause: "exited 0", "exited 2", "was killed by SIGSEGV", "timed out after 5 s".
  std::string what;
  int exit_code = -1;  // its exit code; -1: none (a signal, its deadline, no start)
};

// `timeout`: --health_check_timeout, for the words of a check cut at its deadline.
HealthCheckVerdict judge_health_check(const HealthCheckEnd& end, double timeout);

// One check as the node reports it.
struct HealthCheckReport {
  std::string command;  // --health_check
  HealthCheckVerdict verdict;
  double seconds = 0;  // how long it ran
  // Its last lines of output (stdout and stderr together, in the order written), oldest first.
  std::vector<std::string> last_lines;
};

// The lines of a check's output kept for the report.
inline constexpr std::size_t kHealthCheckLines = 20;

// Why the node leaves (a quarantine's why, on every node): "its health check `CMD` exited 1".
std::string quarantine_reason(const HealthCheckReport& report);
// The warning of a check that did not pass or fail: one line, ending in '\n'.
std::string health_check_warning(const HealthCheckReport& report);
// The summary's account of a check that made the node leave: its last lines, each indented, after
// a line that names it; "" when it printed nothing.
std::string health_check_output_text(const HealthCheckReport& report);

}  // namespace ddprun::launcher
