// Text helpers for parsing what users and tools write.
#pragma once

#include <cstdio>
#include <string>
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

// A size as people read it: "512 B", "1.5 KiB", "12.0 MiB", "1.0 GiB", "2.3 TiB".
inline std::string size_words(unsigned long long bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

}  // namespace ddprun
