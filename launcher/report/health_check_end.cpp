#include "report/health_check_end.hpp"

#include <sys/wait.h>

#include <cstring>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/system.hpp"

namespace ddprun::launcher {

HealthCheckVerdict judge_health_check(const HealthCheckEnd& end, double timeout) {
  HealthCheckVerdict v;
  v.action = HealthAction::kWarnAndJoin;
  if (end.start_error != 0) {
    v.what = fmt::format("could not start: {}", std::strerror(end.start_error));
  } else if (end.timed_out) {
    // Its own end may have come first, between the deadline and the kill: the deadline decides.
    v.what = fmt::format("timed out after {:g} s (--health_check_timeout)", timeout);
  } else if (WIFEXITED(end.wait_status)) {
    v.exit_code = WEXITSTATUS(end.wait_status);
    v.what = fmt::format("exited {}", v.exit_code);
    if (v.exit_code == 0) v.action = HealthAction::kJoin;
    if (v.exit_code == 1) v.action = HealthAction::kQuarantine;
  } else if (WIFSIGNALED(end.wait_status)) {
    v.what = fmt::format("was killed by {}", signal_name(WTERMSIG(end.wait_status)));
  } else {
    v.what = fmt::format("ended with wait status {}", end.wait_status);
  }
  return v;
}

std::string quarantine_reason(const HealthCheckReport& report) {
  return fmt::format("its health check `{}` {}", shown(report.command), report.verdict.what);
}

std::string health_check_warning(const HealthCheckReport& report) {
  return fmt::format("ddprun: warning: the health check `{}` {}; joining anyway (only exit 1 keeps the node out)\n",
                     shown(report.command), report.verdict.what);
}

std::string health_check_output_text(const HealthCheckReport& report) {
  if (report.last_lines.empty()) return "";
  std::string text = fmt::format(
      "ddprun: the health check's last {} of output:\n",
      report.last_lines.size() == 1 ? std::string("line") : fmt::format("{} lines", report.last_lines.size()));
  for (const auto& line : report.last_lines) text += "  " + line + "\n";
  return text;
}

}  // namespace ddprun::launcher
