// The console's line prefix: --log_line_prefix (also PET_LOG_LINE_PREFIX and "log_line_prefix"
// in --config), else torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else "[rank${rank}]: ".
#pragma once

#include <string>
#include <string_view>

namespace ddprun::config {

inline constexpr const char* kDefaultLinePrefix = "[rank${rank}]: ";
// torchrun's console prefix template, read when --log_line_prefix is not given; empty or unset:
// the default, as torchrun reads it.
inline constexpr const char* kLogLinePrefixTemplate = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";

// Checks a template (--log_line_prefix=TEMPLATE, `name` in the message): at most 256 characters,
// no control character (a newline would cut the line it prefixes). Throws UsageError.
void check_line_prefix(std::string_view name, std::string_view tmpl);

// `tmpl` with ${role_name}, ${rank} and ${local_rank} (or $role_name, $rank, $local_rank)
// substituted, "$$" read as "$", and any other '$' left as written: what torchrun 2.11 does
// with Python's string.Template.safe_substitute.
std::string line_prefix(std::string_view tmpl, std::string_view role_name, int rank, int local_rank);

}  // namespace ddprun::config
