// The failure vocabulary both sides speak: the kinds of failure a worker's end can be, with what
// each means to the restart policy and to quarantine, and each kind's one name, used on the
// wire, in every output and in --failure_rules. The launcher finds a failure's kind
// (launcher/report/failure_classifier.hpp); elastic/ decides on it (restart_policy.hpp,
// quarantine.hpp). Names are converted to kinds and back here only. Header-only, as the rest of
// the contract (ddprun_contract): elastic's core links no compiled part of config/.
#pragma once

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// The kinds, each once with all it means, in one list that makes both the enum and the table of
// its rows (below), so that a kind cannot be added without its row.
//   X(enumerator, name, retryable, hardware_like, consequence)
//   syntax_error: SyntaxError, IndentationError, TabError: not retryable
//   import_error: ModuleNotFoundError, ImportError: not retryable
//   python_exception: any other Python exception, with its type
//   cuda_oom: torch's OutOfMemoryError, "CUDA out of memory"
//   host_oom: the kernel's out-of-memory killer
//   nccl_error: NCCL errors, DistBackendError, the NCCL watchdog's collective timeouts
//   cuda_error: a CUDA error other than out of memory: an illegal access, a launch failure, ECC
//   collective_timeout: gloo's and the worker library's collective timeouts
//   segfault: SIGSEGV, SIGBUS, SIGILL, SIGFPE
//   abort: SIGABRT
//   killed: SIGKILL, SIGTERM or another signal sent from outside ddprun
//   hang: no progress within --hang_timeout
//   exit_code: a plain non-zero exit
//   consequence: failed only because another rank did (its peer closed the connection)
#define DDPRUN_FAILURE_KINDS(X)                                   \
  X(kSyntaxError, "syntax_error", false, false, false)            \
  X(kImportError, "import_error", false, false, false)            \
  X(kPythonException, "python_exception", true, false, false)     \
  X(kCudaOom, "cuda_oom", true, false, false)                     \
  X(kHostOom, "host_oom", true, true, false)                      \
  X(kNcclError, "nccl_error", true, true, false)                  \
  X(kCudaError, "cuda_error", true, true, false)                  \
  X(kCollectiveTimeout, "collective_timeout", true, false, false) \
  X(kSegfault, "segfault", true, true, false)                     \
  X(kAbort, "abort", true, true, false)                           \
  X(kKilled, "killed", true, false, false)                        \
  X(kHang, "hang", true, true, false)                             \
  X(kExitCode, "exit_code", true, false, false)                   \
  X(kConsequence, "consequence", true, false, true)

#define DDPRUN_FAILURE_KIND_ENUMERATOR(kind, name, retryable, hardware_like, consequence) kind,
enum class FailureKind { DDPRUN_FAILURE_KINDS(DDPRUN_FAILURE_KIND_ENUMERATOR) };
#undef DDPRUN_FAILURE_KIND_ENUMERATOR

namespace failure_kind_detail {

struct KindRow {
  FailureKind kind;
  const char* name;
  bool retryable;
  bool hardware_like;
  bool consequence;
};

#define DDPRUN_FAILURE_KIND_ROW(kind, name, retryable, hardware_like, consequence) \
  KindRow{FailureKind::kind, name, retryable, hardware_like, consequence},
// Every kind once, at its enum's value (both come from the one list above).
inline constexpr KindRow kKinds[] = {DDPRUN_FAILURE_KINDS(DDPRUN_FAILURE_KIND_ROW)};
#undef DDPRUN_FAILURE_KIND_ROW

constexpr const KindRow& row(FailureKind kind) { return kKinds[static_cast<std::size_t>(kind)]; }

}  // namespace failure_kind_detail

// All kinds, in the order above (for tables and documentation).
inline const std::vector<FailureKind>& all_failure_kinds() {
  static const std::vector<FailureKind> kinds = [] {
    std::vector<FailureKind> all;
    for (const auto& r : failure_kind_detail::kKinds) all.push_back(r.kind);
    return all;
  }();
  return kinds;
}

// "syntax_error", "cuda_oom", ...: the kind's name everywhere.
constexpr const char* to_string(FailureKind kind) { return failure_kind_detail::row(kind).name; }

// The kind `name` names; nullopt for any other text.
inline std::optional<FailureKind> failure_kind_named(std::string_view name) {
  for (const auto& r : failure_kind_detail::kKinds) {
    if (name == r.name) return r.kind;
  }
  return std::nullopt;
}

// Whether running the same code again may help: false for syntax_error and import_error only.
constexpr bool retryable(FailureKind kind) { return failure_kind_detail::row(kind).retryable; }
// Whether it points at the node rather than at the program (NCCL and CUDA errors, fatal
// signals, the host's out-of-memory killer, hangs): what quarantine counts against a node.
constexpr bool hardware_like(FailureKind kind) { return failure_kind_detail::row(kind).hardware_like; }
// Whether it only followed another rank's failure: never the root cause while another is known.
constexpr bool consequence(FailureKind kind) { return failure_kind_detail::row(kind).consequence; }

// Whether `name` may name a kind of the user's own in --failure_rules: lower-case letters,
// digits and '_', starting with a letter, at most 64.
inline bool valid_rule_kind(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

// A failure's kind as a report carries it: one of ddprun's, or a name of the user's own from
// --failure_rules; a rule naming one of ddprun's kinds gives that kind. Empty until the failure
// is classified.
class FailureKindName {
 public:
  FailureKindName() = default;
  FailureKindName(FailureKind kind) : name_(to_string(kind)), known_(kind) {}  // implicit: a kind is its name

  // The kind `name` names: one of ddprun's names, or a rule's (lower-case letters, digits and
  // '_', starting with a letter, at most 64: valid_rule_kind); nullopt for anything else, ""
  // among them.
  static std::optional<FailureKindName> parse(std::string_view name) {
    if (const auto kind = failure_kind_named(name)) return FailureKindName(*kind);
    if (!valid_rule_kind(name)) return std::nullopt;
    FailureKindName named;
    named.name_ = std::string(name);
    return named;
  }

  const std::string& name() const { return name_; }
  bool empty() const { return name_.empty(); }
  // ddprun's kind; nullopt for a rule's own name or none.
  std::optional<FailureKind> known() const { return known_; }
  bool is(FailureKind kind) const { return known_ == kind; }
  bool hardware_like() const { return known_ && ddprun::hardware_like(*known_); }
  bool consequence() const { return known_ && ddprun::consequence(*known_); }

  bool operator==(const FailureKindName& other) const { return name_ == other.name_; }
  bool operator!=(const FailureKindName& other) const { return name_ != other.name_; }

 private:
  std::string name_;
  std::optional<FailureKind> known_;
};

}  // namespace ddprun
