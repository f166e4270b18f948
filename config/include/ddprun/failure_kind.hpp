// The failure vocabulary both sides speak: the kinds of failure a worker's end can be, with what
// each means to the restart policy and to quarantine, and each kind's one name, used on the
// wire, in every output and in --failure_rules. The launcher finds a failure's kind
// (launcher/report/failure_classifier.hpp); elastic/ decides on it (restart_policy.hpp,
// quarantine.hpp). Names are converted to kinds and back here only. Header-only, as the rest of
// the contract (ddprun_contract): elastic's core links no compiled part of config/.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

enum class FailureKind {
  kSyntaxError,        // SyntaxError, IndentationError, TabError: not retryable
  kImportError,        // ModuleNotFoundError, ImportError: not retryable
  kPythonException,    // any other Python exception, with its type
  kCudaOom,            // torch's OutOfMemoryError, "CUDA out of memory"
  kHostOom,            // the kernel's out-of-memory killer
  kNcclError,          // NCCL errors, DistBackendError, the NCCL watchdog's collective timeouts
  kCudaError,          // a CUDA error other than out of memory: an illegal access, a launch failure, ECC
  kCollectiveTimeout,  // gloo's and the worker library's collective timeouts
  kSegfault,           // SIGSEGV, SIGBUS, SIGILL, SIGFPE
  kAbort,              // SIGABRT
  kKilled,             // SIGKILL, SIGTERM or another signal sent from outside ddprun
  kHang,               // no progress within --hang_timeout
  kExitCode,           // a plain non-zero exit
  kConsequence,        // failed only because another rank did (its peer closed the connection)
};

namespace failure_kind_detail {

struct KindRow {
  FailureKind kind;
  const char* name;
  bool retryable;
  bool hardware_like;
  bool consequence;
};

// The vocabulary: every kind once, in the enum's order, with all it means.
inline constexpr std::array<KindRow, 14> kKinds = {{
    //                                 name                retryable hardware consequence
    {FailureKind::kSyntaxError, "syntax_error", false, false, false},
    {FailureKind::kImportError, "import_error", false, false, false},
    {FailureKind::kPythonException, "python_exception", true, false, false},
    {FailureKind::kCudaOom, "cuda_oom", true, false, false},
    {FailureKind::kHostOom, "host_oom", true, true, false},
    {FailureKind::kNcclError, "nccl_error", true, true, false},
    {FailureKind::kCudaError, "cuda_error", true, true, false},
    {FailureKind::kCollectiveTimeout, "collective_timeout", true, false, false},
    {FailureKind::kSegfault, "segfault", true, true, false},
    {FailureKind::kAbort, "abort", true, true, false},
    {FailureKind::kKilled, "killed", true, false, false},
    {FailureKind::kHang, "hang", true, true, false},
    {FailureKind::kExitCode, "exit_code", true, false, false},
    {FailureKind::kConsequence, "consequence", true, false, true},
}};

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < kKinds.size(); ++i) {
    if (static_cast<std::size_t>(kKinds[i].kind) != i) return false;
  }
  return true;
}
static_assert(in_enum_order(), "kKinds holds every kind at its enum's value");

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
