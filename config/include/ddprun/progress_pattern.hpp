// --progress_pattern: a line of a worker's output that matches counts as its progress, for
// programs that neither the worker library nor ddprun's Python module reaches. Patterns are
// ECMAScript regular expressions (std::regex), searched anywhere in the line (anchor with ^).
// One named group is understood, `step`, written (?<step>...) or (?P<step>...): std::regex has no
// named groups, so it is rewritten as a plain group and its number remembered; the digits it
// captured become the rank's last step. Other named groups are refused.
#pragma once

#include <cstddef>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::config {

// A pattern sees at most this many bytes of a line: the first of a longer one (and of each 64 KiB
// piece of a very long line). Progress lines are short; this bounds the cost of every line and
// the depth std::regex's recursive matcher may reach.
inline constexpr std::size_t kProgressLineBytes = 4096;

class ProgressPattern {
 public:
  // Throws UsageError naming --progress_pattern and `text` when it is not a valid pattern.
  explicit ProgressPattern(std::string text);

  const std::string& text() const { return text_; }

  struct Match {
    std::optional<long long> step;  // when the pattern has a step group, it took part, and holds a number
  };
  // Whether `line` (without its newline) matches.
  std::optional<Match> match(std::string_view line) const;

 private:
  std::string text_;
  std::regex regex_;
  std::size_t step_group_ = 0;  // 0: none
};

// The first of `patterns` that matches `line`, with its step; nullopt when none does.
std::optional<ProgressPattern::Match> match_progress(const std::vector<ProgressPattern>& patterns,
                                                     std::string_view line);

}  // namespace ddprun::config
