// Text helpers for parsing what users and tools write.
#pragma once

#include <string_view>

namespace ddprun {

// `s` without the leading and trailing characters of `blanks`.
inline std::string_view trim(std::string_view s, std::string_view blanks = " \t\r\n") {
  const auto first = s.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(blanks) - first + 1);
}

// `s` without the leading characters of `blanks` (what follows the text is kept).
inline std::string_view trim_left(std::string_view s, std::string_view blanks = " \t\r\n") {
  const auto first = s.find_first_not_of(blanks);
  return first == std::string_view::npos ? std::string_view() : s.substr(first);
}

}  // namespace ddprun
