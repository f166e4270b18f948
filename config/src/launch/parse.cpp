// The grammars of parse.hpp. strtoll and strtod, not std::from_chars: they take the blanks and
// the '+' that values were accepted with before the parsers were one (PET_NNODES=" 2").
#include "ddprun/parse.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"

namespace ddprun::config {

UsageError bad_value(std::string_view name, std::string_view text, std::string_view accepted) {
  return UsageError(fmt::format("{}={}: expected {}", name, shown(text), accepted));
}

std::optional<long long> to_integer(std::string_view text) {
  const std::string s(text);  // strtoll wants a NUL at the end; one within is refused below
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0) return std::nullopt;
  return value;
}

int parse_integer(std::string_view name, std::string_view text, int min, int max, std::string_view accepted) {
  const auto value = to_integer(text);
  if (!value || *value < min || *value > max) throw bad_value(name, text, accepted);
  return static_cast<int>(*value);
}

std::optional<double> to_seconds(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(s.c_str(), &end);
  // !(value >= 0) and !(value <= max) also refuse nan, which every comparison is false for.
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !(value >= 0) || !(value <= kMaxTimeoutSeconds)) {
    return std::nullopt;
  }
  return value;
}

double parse_seconds(std::string_view name, std::string_view text, Zero zero) {
  const auto value = to_seconds(text);
  if (!value || (zero == Zero::kRefused && *value == 0)) {
    throw bad_value(name, text,
                    fmt::format("a number of seconds {}, {}", zero == Zero::kAllowed ? "(0 or more)" : "greater than 0",
                                kMaxTimeoutText));
  }
  return *value;
}

std::optional<unsigned long long> to_size(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 19) return std::nullopt;
  std::string unit(text.substr(digits));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
  if (unit.size() == 3 && unit.compare(1, 2, "IB") == 0) unit.resize(1);
  int shift = 0;
  if (unit == "K") {
    shift = 10;
  } else if (unit == "M") {
    shift = 20;
  } else if (unit == "G") {
    shift = 30;
  } else if (unit == "T") {
    shift = 40;
  } else if (!unit.empty()) {
    return std::nullopt;
  }
  const unsigned long long number = std::stoull(std::string(text.substr(0, digits)));
  if (number > (1ULL << (62 - shift))) return std::nullopt;
  return number << shift;
}

unsigned long long parse_size(std::string_view name, std::string_view text, unsigned long long min) {
  const auto value = to_size(text);
  if (!value || *value < min) {
    throw bad_value(name, text,
                    fmt::format("a size such as 512M or 4G (a whole number and K, M, G or T, powers of 1024), at "
                                "least {}K",
                                min >> 10));
  }
  return *value;
}

std::optional<bool> to_bool(std::string_view text) {
  if (text.size() > 5) return std::nullopt;
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* yes : {"1", "true", "t", "yes", "y", "on"}) {
    if (lower == yes) return true;
  }
  for (const char* no : {"0", "false", "f", "no", "n", "off"}) {
    if (lower == no) return false;
  }
  return std::nullopt;
}

bool parse_bool(std::string_view name, std::string_view text) {
  const auto value = to_bool(text);
  if (!value) throw bad_value(name, text, "true or false (or 1/0, yes/no, on/off)");
  return *value;
}

std::size_t parse_choice(std::string_view name, std::string_view text, std::initializer_list<std::string_view> words) {
  std::string accepted;
  std::size_t listed = 0;
  const std::size_t to_list = words.size() - static_cast<std::size_t>(std::count(words.begin(), words.end(), ""));
  for (const std::string_view word : words) {
    if (word.empty()) continue;
    accepted += listed == 0 ? "" : listed + 1 == to_list ? " or " : ", ";
    accepted += word;
    ++listed;
  }
  const auto it = std::find(words.begin(), words.end(), text);
  if (it == words.end()) throw bad_value(name, text, accepted);
  return static_cast<std::size_t>(it - words.begin());
}

}  // namespace ddprun::config
