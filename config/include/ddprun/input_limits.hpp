// Limits on what a user may give ddprun, and how a bad value is quoted back. Header-only: the
// launch configuration, the SLURM parsers and elastic's --rdzv_conf all use it.
//
// Every bad input is one line on stderr and exit 64 (exit_codes.hpp). A value is quoted at most
// kMaxShownChars long and on one line, so that a 100 kB value or one with newlines cannot flood
// the terminal or the job's log.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ddprun {

// The longest timeout any flag or --rdzv_conf key accepts, about 31 years: "never" for a job,
// and far from where the clocks' 64-bit nanosecond counts overflow (292 years; a timer of 1e10 s
// used to wrap around and fire at once). inf, nan and 1e308 are refused.
inline constexpr double kMaxTimeoutSeconds = 1e9;
// How messages state that limit.
inline constexpr const char* kMaxTimeoutText = "at most 1000000000 (about 31 years)";
// A --config file larger than this is refused before it is parsed.
inline constexpr std::size_t kMaxConfigFileBytes = 1024 * 1024;
// JSON nested deeper than this is refused while parsing (a --config file has depth 2).
inline constexpr int kMaxJsonDepth = 64;
// A host name or address given to a flag (DNS limits names to 253 characters).
inline constexpr std::size_t kMaxHostChars = 255;
inline constexpr std::size_t kMaxShownChars = 80;
// The least --snapshot_dir_size: a tmpfs smaller than a megabyte holds no checkpoint, and a size
// without a unit ("4") is then a mistake caught, not a folder of one page.
inline constexpr unsigned long long kMinSnapshotDirSize = 1ULL << 20;

// `value` as an error message quotes it: control characters (newlines) become '?', and text
// past `max` characters is cut and marked with "...".
inline std::string shown(std::string_view value, std::size_t max = kMaxShownChars) {
  std::string out(value.substr(0, max));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (value.size() > max) out += "...";
  return out;
}

}  // namespace ddprun
