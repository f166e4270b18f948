#include "ddprun/failure_rules.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/input_limits.hpp"
#include "ddprun/launch_config.hpp"

namespace ddprun::config {
namespace {

// A line seen by a rule is cut here: stderr lines can be megabytes (a tensor printed), and
// std::regex's matcher recurses per character.
constexpr std::size_t kRuleLineBytes = 4096;
constexpr std::size_t kMaxRules = 256;

constexpr const char* kShape =
    "expected a JSON array of {\"pattern\": REGEX, \"kind\": NAME, \"retryable\": true|false}";

}  // namespace

bool FailureRule::matches(std::string_view line) const {
  if (line.size() > kRuleLineBytes) line = line.substr(0, kRuleLineBytes);
  return std::regex_search(line.begin(), line.end(), *regex);
}

std::vector<FailureRule> parse_failure_rules(const std::string& json_text) {
  std::vector<FailureRule> rules;
  if (json_text.empty()) return rules;
  const auto fail = [](const std::string& what) {
    return UsageError(fmt::format("--failure_rules: {}; {}", what, kShape));
  };
  const auto doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw fail(fmt::format("{} is not valid JSON", shown(json_text)));
  if (!doc.is_array()) throw fail(fmt::format("{} is not an array", shown(json_text)));
  if (doc.size() > kMaxRules) throw fail(fmt::format("more than {} rules", kMaxRules));
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const auto& item = doc[i];
    const auto where = [&](const std::string& what) { return fail(fmt::format("rule {}: {}", i, what)); };
    if (!item.is_object()) throw where("not an object");
    for (const auto& [key, value] : item.items()) {
      if (key != "pattern" && key != "kind" && key != "retryable") {
        throw where(fmt::format("unknown key \"{}\"", shown(key)));
      }
    }
    if (!item.contains("pattern") || !item["pattern"].is_string() || item["pattern"].get<std::string>().empty()) {
      throw where("\"pattern\" must be a non-empty string");
    }
    const auto kind = item.contains("kind") && item["kind"].is_string()
                          ? FailureKindName::parse(item["kind"].get<std::string>())
                          : std::nullopt;
    if (!kind) throw where("\"kind\" must be a name of lower-case letters, digits and '_', such as \"nccl_error\"");
    if (!item.contains("retryable") || !item["retryable"].is_boolean()) {
      throw where("\"retryable\" must be true or false");
    }
    FailureRule rule;
    rule.pattern = item["pattern"].get<std::string>();
    rule.kind = *kind;
    rule.retryable = item["retryable"].get<bool>();
    try {
      rule.regex = std::make_shared<const std::regex>(rule.pattern, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      throw where(fmt::format("\"pattern\" {}: {} (expected an ECMAScript regular expression)", shown(rule.pattern),
                              e.what()));
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

std::string failure_rules_json(const std::vector<FailureRule>& rules) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : rules) {
    list.push_back({{"pattern", r.pattern}, {"kind", r.kind.name()}, {"retryable", r.retryable}});
  }
  return list.dump();
}

}  // namespace ddprun::config
