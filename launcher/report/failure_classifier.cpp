#include "report/failure_classifier.hpp"

#include <signal.h>
#include <string.h>

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "ddprun/system.hpp"
#include "ddprun/text.hpp"

namespace ddprun::launcher {
namespace {

// A cause is one line of at most this many characters.
constexpr std::size_t kCauseChars = 300;
// Lines longer than this are cut before a pattern sees them (std::regex recurses per character).
constexpr std::size_t kLineBytes = 4096;

// PyTorch 2.x prefixes what a rank prints from distributed code with "[rank1]: ".
std::string_view without_rank_prefix(std::string_view line) {
  static const std::regex prefix(R"(^\[rank\d+\]: ?)");
  std::cmatch m;
  if (std::regex_search(line.data(), line.data() + line.size(), m, prefix)) line.remove_prefix(m.length(0));
  return line;
}

std::string one_line(std::string_view text) {
  text = trim(text.substr(0, text.find('\n')));
  if (text.size() <= kCauseChars) return std::string(text);
  std::size_t cut = kCauseChars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside UTF-8
  return std::string(text.substr(0, cut)) + " ...";
}

// Every line ddprun saw, newest evidence first: the error message, the stderr tail from its
// end, then the error file's traceback.
std::vector<std::string_view> evidence_lines(const FailureEvidence& e) {
  std::vector<std::string_view> lines;
  const auto add_text = [&](const std::string& text) {
    std::string_view rest = text;
    while (!rest.empty()) {
      const std::size_t end = std::min(rest.find('\n'), rest.size());
      lines.push_back(rest.substr(0, std::min(end, kLineBytes)));
      rest.remove_prefix(std::min(end + 1, rest.size()));
    }
  };
  add_text(e.error_message);
  for (auto it = e.stderr_tail.rbegin(); it != e.stderr_tail.rend(); ++it) {
    lines.push_back(std::string_view(*it).substr(0, kLineBytes));
  }
  add_text(e.traceback);
  return lines;
}

// The first line that matches `pattern`.
std::optional<std::string_view> find_line(const std::vector<std::string_view>& lines, const std::regex& pattern) {
  for (std::string_view line : lines) {
    if (std::regex_search(line.begin(), line.end(), pattern)) return without_rank_prefix(line);
  }
  return std::nullopt;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> lines;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find('\n'), rest.size());
    lines.emplace_back(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  return lines;
}

// The Python error of the stderr tail, else of the error file's traceback and message.
std::optional<PythonError> python_error(const FailureEvidence& e) {
  if (auto found = find_python_error(e.stderr_tail)) return found;
  std::vector<std::string> lines = split(e.traceback);
  for (auto& line : split(e.error_message)) lines.push_back(std::move(line));
  return find_python_error(lines);
}

struct TextRule {
  FailureKind kind;
  std::regex pattern;
};

// The rules read in the text a worker left, in order. A consequence needs more (another
// failure first) and is decided before these.
const std::vector<TextRule>& text_rules() {
  using K = FailureKind;
  const auto icase = std::regex::ECMAScript | std::regex::icase | std::regex::optimize;
  const auto exact = std::regex::ECMAScript | std::regex::optimize;
  static const std::vector<TextRule> rules = {
      {K::kSyntaxError, std::regex(R"(^(\[rank\d+\]: ?)?(SyntaxError|IndentationError|TabError)\b)", exact)},
      {K::kImportError, std::regex(R"(^(\[rank\d+\]: ?)?(ModuleNotFoundError|ImportError)\b)", exact)},
      {K::kCudaOom, std::regex(R"(OutOfMemoryError|(CUDA|HIP) out of memory|CUDA error: out of memory)", exact)},
      {K::kNcclError, std::regex(R"(NCCL error|nccl(InternalError|SystemError|UnhandledCudaError|RemoteError|)"
                                 R"(InvalidUsage|InvalidArgument)|DistBackendError|Watchdog caught collective )"
                                 R"(operation timeout|NCCL communicator was aborted)",
                                 exact)},
      // After NCCL's (ncclUnhandledCudaError is NCCL's word) and CUDA's out of memory.
      {K::kCudaError, std::regex(R"(CUDA error: |CUDA kernel errors might be|cudaError[A-Z]\w+|)"
                                 R"((CUBLAS|CUDNN)_STATUS_EXECUTION_FAILED|uncorrectable ECC error)",
                                 exact)},
      {K::kCollectiveTimeout, std::regex(R"(Timed out waiting \d+ ?ms for (recv|send) operation|timed out on rank )"
                                         R"(\d+ of \d+ after|gloo.*timed out|Operation timed out!)",
                                         icase)},
  };
  return rules;
}

// A peer's connection closed under it: what a rank sees when another one died first.
const std::regex& peer_gone() {
  static const std::regex pattern(
      R"(Connection reset by peer|Connection closed by peer|Broken pipe|ECONNRESET|EPIPE|Connection refused|)"
      R"(peer closed|closed its connection|remote process exited|Socket closed)",
      std::regex::ECMAScript | std::regex::icase | std::regex::optimize);
  return pattern;
}

std::string signal_text(int signal) { return fmt::format("{} ({})", signal_name(signal), ::strsignal(signal)); }

std::string human_bytes(long long bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, units[unit]);
}

Classification by_kind(FailureKind kind, std::string cause) {
  Classification c;
  c.kind = kind;
  c.retryable = retryable(kind);
  c.cause = one_line(cause);
  return c;
}

Classification by_signal(const FailureEvidence& e) {
  using K = FailureKind;
  switch (e.signal) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE: return by_kind(K::kSegfault, signal_text(e.signal));
    case SIGABRT: return by_kind(K::kAbort, signal_text(e.signal));
    case SIGKILL:
      if (e.oom_kills && *e.oom_kills > 0) {
        return by_kind(K::kHostOom,
                       fmt::format("killed by the out-of-memory killer (SIGKILL; memory.events oom_kill +{} in the "
                                   "workers' cgroup{})",
                                   *e.oom_kills,
                                   e.memory_peak ? ", memory.peak " + human_bytes(*e.memory_peak) : std::string()));
      }
      if (!e.oom_kills && e.kernel_oom_kills && *e.kernel_oom_kills > 0) {
        return by_kind(K::kHostOom,
                       fmt::format("SIGKILL from outside ddprun, probably the out-of-memory killer (the kernel counted "
                                   "{} OOM kill{} on this host during the round; no cgroup to tell whose; check dmesg)",
                                   *e.kernel_oom_kills, *e.kernel_oom_kills == 1 ? "" : "s"));
      }
      if (!e.oom_kills && e.kernel_oom_kills) {
        return by_kind(K::kKilled, "SIGKILL from outside ddprun (not the out-of-memory killer: the kernel counted no "
                                   "OOM kill during the round)");
      }
      if (!e.oom_kills) {
        return by_kind(K::kHostOom, "SIGKILL from outside ddprun, probably the out-of-memory killer (no cgroup to "
                                    "tell for certain; check dmesg)");
      }
      return by_kind(K::kKilled, "SIGKILL from outside ddprun (not the out-of-memory killer: memory.events has "
                                 "no new oom_kill)");
    default: return by_kind(K::kKilled, signal_text(e.signal) + " from outside ddprun");
  }
}

}  // namespace

bool mentions_lost_peer(const std::deque<std::string>& lines) {
  return std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
    const std::string_view cut = std::string_view(line).substr(0, kLineBytes);
    return std::regex_search(cut.begin(), cut.end(), peer_gone());
  });
}

std::optional<PythonError> find_python_error(const std::vector<std::string>& lines) {
  static const std::regex exception_line(
      R"(^(([A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(Error|Exception|Exit|Interrupt|Failure|Warning))(: .*)?$)",
      std::regex::ECMAScript | std::regex::optimize);
  static const std::regex frame_line(R"re(^\s*File "([^"]+)", line (\d+))re", std::regex::ECMAScript | std::regex::optimize);
  for (std::size_t i = lines.size(); i-- > 0;) {
    const std::string_view line = without_rank_prefix(std::string_view(lines[i]).substr(0, kLineBytes));
    std::cmatch m;
    if (!std::regex_match(line.data(), line.data() + line.size(), m, exception_line)) continue;
    // A traceback's frames come before it; a line that only looks like an exception has none.
    for (std::size_t j = i; j-- > 0;) {
      const std::string_view frame = without_rank_prefix(std::string_view(lines[j]).substr(0, kLineBytes));
      std::cmatch f;
      if (!std::regex_search(frame.data(), frame.data() + frame.size(), f, frame_line)) continue;
      return PythonError{m.str(1), one_line(line), fmt::format("{}:{}", f.str(1), f.str(2))};
    }
  }
  return std::nullopt;
}

Classification classify_failure(const FailureEvidence& e, const std::vector<config::FailureRule>& rules) {
  using K = FailureKind;
  const std::vector<std::string_view> lines = evidence_lines(e);
  const auto error = python_error(e);
  const auto with_error = [&](Classification c) {
    if (error) {
      c.exception = error->type;
      c.location = error->location;
    }
    return c;
  };
  for (const auto& rule : rules) {
    for (std::string_view line : lines) {
      if (!rule.matches(line)) continue;
      Classification c = with_error(Classification{});
      c.kind = rule.kind;
      c.retryable = rule.retryable;
      c.cause = one_line(without_rank_prefix(line));
      c.rule = rule.pattern;
      return c;
    }
  }
  if (e.hung) return by_kind(K::kHang, e.error_message.empty() ? "no progress within --hang_timeout" : e.error_message);
  if (e.after_another_failure) {
    if (const auto line = find_line(lines, peer_gone())) return with_error(by_kind(K::kConsequence, std::string(*line)));
  }
  for (const auto& rule : text_rules()) {
    const auto line = find_line(lines, rule.pattern);
    if (!line) continue;
    // The exception's own line says it best ("torch.cuda.OutOfMemoryError: CUDA out of memory...");
    // ddprun's message for an import names the interpreter that ran it.
    std::string cause(*line);
    if (rule.kind == K::kImportError && !e.error_message.empty()) {
      cause = e.error_message;
    } else if (error && std::regex_search(error->line, rule.pattern)) {
      cause = error->line;
    }
    return with_error(by_kind(rule.kind, cause));
  }
  // Stopped by ddprun after another rank failed, with no error of its own (or only the one the
  // stop raised in it: torchelastic's SignalException, a KeyboardInterrupt).
  const bool stop_raised = error && (error->type.find("SignalException") != std::string::npos ||
                                     error->type == "KeyboardInterrupt");
  if (e.after_another_failure && e.stopped_by_ddprun && (!error || stop_raised)) {
    return with_error(by_kind(K::kConsequence, "failed while ddprun stopped it after another rank's failure"));
  }
  if (e.signal != 0) return with_error(by_signal(e));
  if (error) return with_error(by_kind(K::kPythonException, error->line));
  std::string cause = fmt::format("exit code {}", e.exit_code);
  if (!e.error_message.empty()) {
    cause += ": " + e.error_message;
  } else {
    for (auto it = e.stderr_tail.rbegin(); it != e.stderr_tail.rend(); ++it) {
      if (trim(*it).empty()) continue;
      cause += ": " + std::string(without_rank_prefix(*it));
      break;
    }
  }
  return by_kind(K::kExitCode, cause);
}

}  // namespace ddprun::launcher
