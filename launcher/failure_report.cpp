#include "failure_report.hpp"

#include <signal.h>
#include <string.h>

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ddprun::launcher {

std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return fmt::format("signal {}", signal);
}

std::optional<ErrorFileContents> read_error_file(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("message")) return std::nullopt;
  ErrorFileContents contents;
  const auto& message = doc["message"];
  if (message.is_string()) {
    contents.message = message.get<std::string>();
  } else if (message.is_object()) {
    contents.message = message.value("message", std::string());
    if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
      const auto& extra = message["extraInfo"];
      contents.traceback = extra.value("py_callstack", std::string());
      const auto& ts = extra.contains("timestamp") ? extra["timestamp"] : nlohmann::json();
      if (ts.is_string()) contents.timestamp = std::atof(ts.get<std::string>().c_str());
      if (ts.is_number()) contents.timestamp = ts.get<double>();
    }
  }
  return contents;
}

std::string describe_end(const elastic::WorkerFailure& f) {
  if (f.signal == 0) return fmt::format("exit code {}", f.exit_code);
  std::string text = fmt::format("killed by {} (exit code {})", signal_name(f.signal), f.exit_code);
  if (f.signal_from_outside && f.signal == SIGKILL) {
    text += ", not sent by ddprun: killed from outside, often the out-of-memory killer (check dmesg)";
  }
  return text;
}

namespace {

std::string who(const elastic::WorkerFailure& f) {
  return fmt::format("rank {} (local rank {}) on {}, pid {}", f.rank, f.local_rank, f.host, f.pid);
}

}  // namespace

std::string format_failure_summary(const elastic::JobOutcome& outcome, const std::string& program) {
  std::string out;
  const char* plural = outcome.restarts == 1 ? "" : "s";
  if (!outcome.error.empty()) {
    out += fmt::format("ddprun: {} failed: {}\n", program, outcome.error);
  }
  if (outcome.failures.empty()) return out;
  const auto& root = outcome.failures.front();
  out += fmt::format("ddprun: {} failed (exit code {}) after {} restart{}\n", program,
                     outcome.exit_code, outcome.restarts, plural);
  out += fmt::format("  root cause: {}: {}\n", who(root), describe_end(root));
  if (!root.message.empty()) {
    // Only the first line: a traceback belongs in the worker's own output.
    const auto first_line = root.message.substr(0, root.message.find('\n'));
    out += fmt::format("    error: {}\n", first_line);
  }
  if (!root.error_file.empty() && !root.message.empty()) {
    out += fmt::format("    error file: {}\n", root.error_file);
  }
  for (size_t i = 1; i < outcome.failures.size(); ++i) {
    const auto& f = outcome.failures[i];
    out += fmt::format("  also failed: {}: {}", who(f), describe_end(f));
    if (!f.message.empty()) out += ": " + f.message.substr(0, f.message.find('\n'));
    out += "\n";
  }
  return out;
}

}  // namespace ddprun::launcher
