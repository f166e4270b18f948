#include "report/failure_report.hpp"

#include <algorithm>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ddprun/failure_text.hpp"

namespace ddprun::launcher {

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

namespace {

// "a\nb\n" -> {"a", "b"}; "" -> {}.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace

std::string traceback_tail(const std::string& traceback, int max_lines) {
  const std::vector<std::string> lines = split_lines(traceback);
  const std::size_t kept = std::min(lines.size(), static_cast<std::size_t>(std::max(max_lines, 0)));
  const std::size_t left_out = lines.size() - kept;
  std::vector<std::string> tail;
  if (left_out > 0) {
    tail.push_back(fmt::format("... ({} earlier line{} left out)", left_out, left_out == 1 ? "" : "s"));
  }
  for (std::size_t i = left_out; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.size() <= kTracebackLineChars) {
      tail.push_back(line);
      continue;
    }
    std::size_t cut = kTracebackLineChars;
    // Not inside a UTF-8 character: the text goes out as JSON, which must be valid UTF-8.
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
    tail.push_back(fmt::format("{} [... {} more characters]", line.substr(0, cut), line.size() - cut));
  }
  return fmt::format("{}", fmt::join(tail, "\n"));
}

void add_error_file(elastic::WorkerFailure& failure, const std::string& path, bool kept) {
  const auto contents = read_error_file(path);
  if (!contents) return;
  failure.message = contents->message;
  failure.traceback = traceback_tail(contents->traceback);
  if (kept && (!failure.message.empty() || !failure.traceback.empty())) failure.error_file = path;
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
  const std::string root_kind = describe_kind_and_cause(root);
  out += fmt::format("  root cause: {}: {}{}\n", who(root), describe_end(root), root_kind.empty() ? "" : ": " + root_kind);
  if (!root.message.empty()) {
    // The first line; the rest of a long message ends the traceback, for Python.
    out += fmt::format("    error: {}\n", root.message.substr(0, root.message.find('\n')));
  }
  if (!root.traceback.empty()) {
    out += root.hung ? "    where:\n" : "    traceback:\n";
    for (const std::string& line : split_lines(root.traceback)) out += fmt::format("      {}\n", line);
  }
  if (!root.error_file.empty()) out += fmt::format("    error file: {}\n", root.error_file);
  // Every rank that failed on its own, with its cause, then those that failed only because
  // another did (the coordinator put them last).
  for (size_t i = 1; i < outcome.failures.size(); ++i) {
    const auto& f = outcome.failures[i];
    const std::string kind = f.kind.empty() ? f.message.substr(0, f.message.find('\n')) : describe_kind_and_cause(f);
    out += fmt::format("  also failed{}: {}: {}{}\n", f.kind.consequence() ? " (a consequence)" : "", who(f),
                       describe_end(f), kind.empty() ? "" : ": " + kind);
  }
  if (!outcome.stop_reason.empty()) out += fmt::format("ddprun: {}\n", outcome.stop_reason);
  return out;
}

FailureEvidence evidence_of(const elastic::WorkerFailure& f, bool stopped_by_ddprun, bool after_another_failure) {
  FailureEvidence e;
  e.exit_code = f.exit_code;
  e.signal = f.signal;
  e.signal_from_outside = f.signal_from_outside;
  e.hung = f.hung;
  e.stopped_by_ddprun = stopped_by_ddprun;
  e.after_another_failure = after_another_failure;
  e.error_message = f.message;
  e.traceback = f.traceback;
  return e;
}

void set_kind(elastic::WorkerFailure& f, const Classification& c) {
  f.kind = c.kind;
  f.retryable = c.retryable;
  f.cause = c.cause;
  f.exception = c.exception;
  f.location = c.location;
}

std::string restart_announcement(const elastic::RoundAssignment& round, int max_restarts) {
  const elastic::RestartReason& reason = round.restart_reason;
  if (reason.restart == 0) {
    return fmt::format("ddprun: restarting workers (restart {} of {})\n", round.restart_count, max_restarts);
  }
  return fmt::format("ddprun: restarting workers ({}): {}\n", elastic::describe_restart_budget(reason),
                     elastic::describe_restart_cause(reason));
}

std::string import_failure_message(const std::string& import_error, const std::string& message,
                                   const std::string& python, const std::string& chosen_by) {
  return fmt::format("{}{}{} (ran under {}, {}; set PYTHON_EXEC to choose another)", message,
                     message.empty() ? "" : ": ", import_error, python, chosen_by);
}

}  // namespace ddprun::launcher
