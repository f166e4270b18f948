#include "report/result_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "ddprun/exit_codes.hpp"
#include "ddprun/failure_text.hpp"
#include "ddprun/system.hpp"

namespace ddprun::launcher {
namespace {

nlohmann::json optional_text(const std::string& text) { return text.empty() ? nlohmann::json() : nlohmann::json(text); }

nlohmann::json failure_json(const elastic::WorkerFailure& f) {
  return {{"rank", f.rank},
          {"local_rank", f.local_rank},
          {"host", f.host},
          {"pid", f.pid},
          {"exit_code", f.exit_code},
          {"signal", f.signal != 0 ? nlohmann::json(signal_name(f.signal)) : nlohmann::json()},
          {"kind", optional_text(f.kind.name())},
          {"retryable", f.retryable},
          {"cause", optional_text(f.cause)},
          {"exception", optional_text(f.exception)},
          {"location", optional_text(f.location)},
          {"step", f.step >= 0 ? nlohmann::json(f.step) : nlohmann::json()}};
}

}  // namespace

nlohmann::json job_result(const elastic::JobOutcome& outcome, int exit_code, int shutdown_signal, int attempt,
                          int max_restarts) {
  nlohmann::json j = {{"exit_code", exit_code},
                      {"kind", nullptr},
                      {"retryable", false},
                      {"message", nullptr},
                      {"root_cause", nullptr},
                      {"failures", nlohmann::json::array()},
                      {"stop_reason", optional_text(outcome.stop_reason)},
                      {"error", optional_text(outcome.error)},
                      {"signal", shutdown_signal != 0 ? nlohmann::json(signal_name(shutdown_signal)) : nlohmann::json()},
                      {"attempt", attempt},
                      {"restarts", outcome.restarts},
                      {"max_restarts", max_restarts}};
  if (exit_code == exit_code::kQuarantined && !outcome.error.empty()) {
    // This node was left out of a job that goes on: drain the host rather than run it again.
    j["kind"] = "quarantined";
    j["message"] = outcome.error;
    if (!outcome.failures.empty()) j["root_cause"] = failure_json(outcome.failures.front());
  } else if (shutdown_signal != 0) {
    // Stopped from outside (a preemption, scancel): the job itself did not fail.
    j["kind"] = "stopped";
    j["retryable"] = true;
    j["message"] = fmt::format("ddprun was stopped by {}", signal_name(shutdown_signal));
  } else if (!outcome.failures.empty()) {
    const auto& root = outcome.failures.front();
    j["kind"] = optional_text(root.kind.name());
    j["retryable"] = outcome.retryable;
    j["message"] = root.cause.empty() ? describe_end(root) : root.cause;
    j["root_cause"] = failure_json(root);
  } else if (!outcome.error.empty()) {
    j["kind"] = "rendezvous";
    j["retryable"] = outcome.retryable;
    j["message"] = outcome.error;
  }
  for (const auto& f : outcome.failures) j["failures"].push_back(failure_json(f));
  j["quarantined"] = nlohmann::json::array();
  for (const auto& q : outcome.quarantined) j["quarantined"].push_back({{"node", q.node}, {"why", q.why}});
  j["health_check"] = nullptr;
  return j;
}

nlohmann::json health_check_json(const HealthCheckReport& report) {
  const HealthCheckVerdict& v = report.verdict;
  const char* result = v.action == HealthAction::kJoin         ? "passed"
                       : v.action == HealthAction::kQuarantine ? "failed"
                                                               : "warning";
  return {{"command", report.command},
          {"result", result},
          {"exit_code", v.exit_code >= 0 ? nlohmann::json(v.exit_code) : nlohmann::json()},
          {"what", v.what},
          {"seconds", report.seconds},
          {"output", report.last_lines}};
}

std::string write_result_file(const std::string& path, const nlohmann::json& result) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  const std::string text = result.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("--result_file={}: cannot create {}: {}", path, temp, std::strerror(errno));
  std::size_t written = 0;
  int error = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  ::close(fd);
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temp.c_str());
    return fmt::format("--result_file={}: cannot write it: {}", path, std::strerror(error));
  }
  return "";
}

}  // namespace ddprun::launcher
