#include "ddprun/progress_pattern.hpp"

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/launch_config.hpp"

namespace ddprun::config {
namespace {

struct Translated {
  std::string ecmascript;
  std::size_t step_group = 0;
};

// Rewrites (?<step>...) and (?P<step>...) as a plain group and counts the capturing groups before
// it, skipping escapes and bracket expressions, where a '(' is a character. Throws the reason as
// a string when another named group appears.
Translated translate(const std::string& text) {
  Translated out;
  std::size_t groups = 0;
  bool in_class = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      out.ecmascript += c;
      if (i + 1 < text.size()) out.ecmascript += text[++i];
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out.ecmascript += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      // A ']' first in the class (or after '^') is a character.
      out.ecmascript += c;
      if (i + 1 < text.size() && text[i + 1] == '^') out.ecmascript += text[++i];
      if (i + 1 < text.size() && text[i + 1] == ']') out.ecmascript += text[++i];
      continue;
    }
    if (c != '(') {
      out.ecmascript += c;
      continue;
    }
    const std::string_view rest = std::string_view(text).substr(i + 1);
    std::size_t name_at = 0;
    if (rest.substr(0, 2) == "?<" && rest.substr(0, 3) != "?<=" && rest.substr(0, 3) != "?<!") name_at = 2;
    if (rest.substr(0, 3) == "?P<") name_at = 3;
    if (name_at == 0) {
      if (rest.substr(0, 1) != "?") ++groups;  // (?: (?= (?! do not capture
      out.ecmascript += c;
      continue;
    }
    const std::size_t close = rest.find('>', name_at);
    const std::string_view name =
        close == std::string_view::npos ? rest.substr(name_at) : rest.substr(name_at, close - name_at);
    if (name != "step" || close == std::string_view::npos) {
      throw std::string(fmt::format("the only named group understood is (?<step>...), not (?<{}>", name));
    }
    if (out.step_group != 0) throw std::string("(?<step>...) appears twice");
    out.step_group = ++groups;
    out.ecmascript += '(';
    i += close + 1;  // past the '>'
  }
  return out;
}

}  // namespace

ProgressPattern::ProgressPattern(std::string text) : text_(std::move(text)) {
  const auto fail = [&](const std::string& why) {
    return UsageError(fmt::format("--progress_pattern={}: {} (expected an ECMAScript regular expression, "
                                  "with (?<step>...) around the step number if any)",
                                  shown(text_), why));
  };
  if (text_.empty()) throw fail("an empty pattern would count every line as progress");
  Translated t;
  try {
    t = translate(text_);
  } catch (const std::string& why) {
    throw fail(why);
  }
  try {
    regex_ = std::regex(t.ecmascript, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    throw fail(e.what());
  }
  step_group_ = t.step_group;
}

std::optional<ProgressPattern::Match> ProgressPattern::match(std::string_view line) const {
  if (line.size() > kProgressLineBytes) line = line.substr(0, kProgressLineBytes);
  std::cmatch m;
  if (!std::regex_search(line.data(), line.data() + line.size(), m, regex_)) return std::nullopt;
  Match out;
  if (step_group_ != 0 && step_group_ < m.size() && m[step_group_].matched) {
    const std::string digits = m[step_group_].str();
    errno = 0;
    char* end = nullptr;
    const long long step = std::strtoll(digits.c_str(), &end, 10);
    if (!digits.empty() && end == digits.c_str() + digits.size() && errno == 0) out.step = step;
  }
  return out;
}

std::optional<ProgressPattern::Match> match_progress(const std::vector<ProgressPattern>& patterns,
                                                     std::string_view line) {
  for (const auto& p : patterns) {
    if (auto m = p.match(line)) return m;
  }
  return std::nullopt;
}

}  // namespace ddprun::config
