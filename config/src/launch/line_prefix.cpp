#include "ddprun/line_prefix.hpp"

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::config {
namespace {

constexpr std::size_t kMaxPrefixChars = 256;

bool identifier_start(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool identifier_char(char c) { return identifier_start(c) || (c >= '0' && c <= '9'); }

}  // namespace

void check_line_prefix(std::string_view name, std::string_view tmpl) {
  const auto refuse = [&](std::string_view problem) {
    return UsageError(fmt::format("{}={}: {}; expected a template of at most {} characters, on one line, with "
                                  "${{rank}}, ${{local_rank}} and ${{role_name}} (empty: no prefix)",
                                  name, shown(tmpl), problem, kMaxPrefixChars));
  };
  if (tmpl.size() > kMaxPrefixChars) throw refuse("too long");
  for (const char c : tmpl) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) throw refuse("a control character");
  }
}

std::string line_prefix(std::string_view tmpl, std::string_view role_name, int rank, int local_rank) {
  const auto value = [&](std::string_view id, std::string& out) {
    if (id == "role_name") out += role_name;
    else if (id == "rank") out += std::to_string(rank);
    else if (id == "local_rank") out += std::to_string(local_rank);
    else return false;
    return true;
  };
  std::string out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    const char c = tmpl[i];
    if (c != '$' || i + 1 == tmpl.size()) {
      out += c;
      ++i;
      continue;
    }
    const char next = tmpl[i + 1];
    if (next == '$') {  // "$$": one '$'
      out += '$';
      i += 2;
    } else if (next == '{') {  // ${name}: a name, then '}'; anything else stays as written
      std::size_t end = i + 2;
      if (end < tmpl.size() && identifier_start(tmpl[end])) {
        while (end < tmpl.size() && identifier_char(tmpl[end])) ++end;
      }
      if (end > i + 2 && end < tmpl.size() && tmpl[end] == '}' && value(tmpl.substr(i + 2, end - i - 2), out)) {
        i = end + 1;
      } else {
        out += c;
        ++i;
      }
    } else if (identifier_start(next)) {  // $name: the longest name
      std::size_t end = i + 1;
      while (end < tmpl.size() && identifier_char(tmpl[end])) ++end;
      if (value(tmpl.substr(i + 1, end - i - 1), out)) {
        i = end;
      } else {
        out += tmpl.substr(i, end - i);
        i = end;
      }
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace ddprun::config
