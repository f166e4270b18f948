// --failure_rules (mostly a --config key): the user's own rules for naming a worker failure's
// kind, as SageMaker HyperPod's log rules do. Each is a regular expression searched in the last
// lines of the failed worker's standard error and in its error file's message; the first rule
// that matches gives the kind and whether a restart may fix it, before ddprun's own rules
// (launcher/report/failure_classifier.hpp) are consulted.
#pragma once

#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/failure_kind.hpp"

namespace ddprun::config {

struct FailureRule {
  std::string pattern;  // ECMAScript regular expression, searched anywhere in a line
  FailureKindName kind;  // ddprun's or the user's own (failure_kind.hpp's valid_rule_kind)
  bool retryable = true;
  std::shared_ptr<const std::regex> regex;

  bool matches(std::string_view line) const;
};

// The rules in `json_text`, a JSON array of {"pattern": REGEX, "kind": NAME, "retryable": BOOL}
// ("" or "[]": none). Throws UsageError naming --failure_rules, the rule's index and what is
// accepted.
std::vector<FailureRule> parse_failure_rules(const std::string& json_text);

// The rules as --print_config and a --config file write them.
std::string failure_rules_json(const std::vector<FailureRule>& rules);

}  // namespace ddprun::config
