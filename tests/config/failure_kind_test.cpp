#include "ddprun/failure_kind.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

TEST_CASE("failure kinds: every kind's name and what it means") {
  struct Row {
    FailureKind kind;
    const char* name;
    bool retryable;
    bool hardware_like;
    bool consequence;
  };
  using K = FailureKind;
  // The names are the wire's, the outputs' and --failure_rules': they never change.
  const std::vector<Row> table = {
      // kind                     name                  retryable hardware consequence
      {K::kSyntaxError, "syntax_error", false, false, false},
      {K::kImportError, "import_error", false, false, false},
      {K::kPythonException, "python_exception", true, false, false},
      {K::kCudaOom, "cuda_oom", true, false, false},
      {K::kHostOom, "host_oom", true, true, false},
      {K::kNcclError, "nccl_error", true, true, false},
      {K::kCudaError, "cuda_error", true, true, false},
      {K::kCollectiveTimeout, "collective_timeout", true, false, false},
      {K::kSegfault, "segfault", true, true, false},
      {K::kAbort, "abort", true, true, false},
      {K::kKilled, "killed", true, false, false},
      {K::kHang, "hang", true, true, false},
      {K::kExitCode, "exit_code", true, false, false},
      {K::kConsequence, "consequence", true, false, true},
  };
  REQUIRE(all_failure_kinds().size() == table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    const Row& row = table[i];
    CAPTURE(row.name);
    CHECK(all_failure_kinds()[i] == row.kind);
    CHECK(std::string(to_string(row.kind)) == row.name);
    CHECK(failure_kind_named(row.name) == row.kind);
    CHECK(retryable(row.kind) == row.retryable);
    CHECK(hardware_like(row.kind) == row.hardware_like);
    CHECK(consequence(row.kind) == row.consequence);
    const auto named = FailureKindName::parse(row.name);
    REQUIRE(named);
    CHECK(named->known() == row.kind);
    CHECK(*named == FailureKindName(row.kind));
    CHECK(named->hardware_like() == row.hardware_like);
    CHECK(named->consequence() == row.consequence);
  }
}

TEST_CASE("failure kinds: a name is one of ddprun's, a rule's own, or refused") {
  struct Row {
    std::string text;
    bool accepted;
  };
  const std::vector<Row> table = {
      {"gpu_fault", true},                  // a --failure_rules kind of the user's own
      {"x9_", true},
      {std::string(64, 'a'), true},
      {std::string(65, 'a'), false},
      {"", false},
      {"Bad", false},
      {"9lives", false},
      {"_x", false},
      {"nccl_error\n", false},
      {"\x1b[31mnccl_error", false},
      {"exit_code\nddprun: forged", false},
      {"gpu fault", false},
  };
  for (const Row& row : table) {
    CAPTURE(row.text);
    const auto named = FailureKindName::parse(row.text);
    CHECK(named.has_value() == row.accepted);
    CHECK(valid_rule_kind(row.text) == row.accepted);
    if (!named) continue;
    CHECK(named->name() == row.text);
    CHECK_FALSE(named->known());  // none of these is ddprun's own
    CHECK_FALSE(named->hardware_like());
    CHECK_FALSE(named->consequence());
  }
  CHECK(FailureKindName().empty());
  CHECK_FALSE(FailureKindName().known());
}

}  // namespace
}  // namespace ddprun
