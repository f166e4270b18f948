#include "ddprun/failure_text.hpp"

#include <signal.h>
#include <string.h>

#include <fmt/format.h>

#include "ddprun/system.hpp"

namespace ddprun::elastic {

std::string describe_end(const WorkerFailure& f) {
  if (f.hung) return fmt::format("hung (exit code {})", f.exit_code);
  if (f.signal == 0) return fmt::format("exit code {}", f.exit_code);
  std::string text = fmt::format("killed by {} (exit code {})", signal_name(f.signal), f.exit_code);
  if (f.signal_from_outside && f.signal == SIGKILL) {
    text += ", not sent by ddprun";
    // Once classified, the kind and its cause say whether the kernel's out-of-memory killer did
    // it (report/failure_classifier.hpp); before, only a hint.
    if (f.kind.empty()) text += ": killed from outside, often the out-of-memory killer (check dmesg)";
  }
  return text;
}

std::string_view cause_after_end(const WorkerFailure& f) {
  std::string_view cause = f.cause;
  const std::string end = fmt::format("exit code {}", f.exit_code);
  if (cause.substr(0, end.size()) != end) return cause;
  const std::string_view rest = cause.substr(end.size());
  // "exit code 12: ..." does not begin with "exit code 1".
  if (rest.empty()) return rest;
  if (rest.substr(0, 2) == ": ") return rest.substr(2);
  return cause;
}

std::string describe_kind_and_cause(const WorkerFailure& f) {
  if (f.kind.empty()) return "";
  std::string text = f.kind.name();
  if (const std::string_view cause = cause_after_end(f); !cause.empty()) text += fmt::format(" ({})", cause);
  if (!f.location.empty()) text += " at " + f.location;
  if (f.step >= 0) text += fmt::format(" at step {}", f.step);
  return text;
}

std::string describe_kind(const WorkerFailure& f) {
  std::string text = fmt::format("rank {} on {}: {}", f.rank, f.host, f.kind.empty() ? "failed" : f.kind.name());
  if (const std::string_view cause = cause_after_end(f); !cause.empty()) text += fmt::format(" ({})", cause);
  return text;
}

std::string describe_stop(const WorkerFailure& f) {
  std::string text =
      fmt::format("worker rank {} (local rank {}) on {}", f.rank, f.local_rank, f.host.empty() ? "?" : f.host);
  if (f.hung) {
    text += " hung";
  } else if (f.signal != 0) {
    const std::string name = signal_name(f.signal);
    text += fmt::format(" was killed by signal {}{}{}", f.signal, name.rfind("SIG", 0) == 0 ? " (" + name + ")" : "",
                        f.signal_from_outside ? " sent from outside ddprun" : "");
  } else {
    text += fmt::format(" failed with exit code {}", f.exit_code);
  }
  if (!f.message.empty()) text += ": " + f.message.substr(0, f.message.find('\n'));
  return text;
}

std::string describe_restart_budget(const RestartReason& r) {
  if (r.window > 0) return fmt::format("restart {} of {} within {:g} s", r.restart, r.max_restarts, r.window);
  return fmt::format("restart {} of {}", r.restart, r.max_restarts);
}

std::string describe_restart_cause(const RestartReason& r) {
  std::string text = "after " + r.after;
  if (r.no_progress > 0) {
    text += fmt::format("; no progress since the start ({} in a row{}), waited {:g} s", r.no_progress,
                        r.crash_loop_limit > 0 ? fmt::format(", the crash loop ends at {}", r.crash_loop_limit) : "",
                        r.waited);
  }
  for (const std::string& node : r.nodes) text += "; " + node;
  return text;
}

std::string describe_restart(const RestartReason& r) {
  if (r.restart == 0) return "";
  return describe_restart_budget(r) + " " + describe_restart_cause(r);
}

}  // namespace ddprun::elastic
