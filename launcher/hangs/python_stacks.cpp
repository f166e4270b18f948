#include "hangs/python_stacks.hpp"

#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "ddprun/system.hpp"
#include "ddprun/text.hpp"

namespace ddprun::launcher {
namespace {

std::uint64_t bit(int sig) { return sig >= 1 && sig <= 64 ? std::uint64_t{1} << (sig - 1) : 0; }

}  // namespace

std::optional<SignalMasks> parse_signal_masks(std::string_view status) {
  SignalMasks masks;
  int found = 0;
  while (!status.empty()) {
    const std::size_t end = status.find('\n');
    const std::string_view line = status.substr(0, end);
    status = end == std::string_view::npos ? std::string_view() : status.substr(end + 1);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    std::uint64_t* field = name == "SigPnd" ? &masks.pending : name == "SigBlk" ? &masks.blocked
                         : name == "SigCgt" ? &masks.caught : nullptr;
    if (field == nullptr) continue;
    const std::string value(trim_left(line.substr(colon + 1), " \t"));
    char* rest = nullptr;
    *field = std::strtoull(value.c_str(), &rest, 16);
    if (value.empty() || rest == nullptr || *rest != '\0') return std::nullopt;
    ++found;
  }
  if (found != 3) return std::nullopt;
  return masks;
}

std::optional<SignalMasks> read_signal_masks(pid_t pid, pid_t tid) {
  const auto status = read_file(fmt::format("/proc/{}/task/{}/status", pid, tid));
  if (!status) return std::nullopt;
  return parse_signal_masks(*status);
}

bool catches(const SignalMasks& masks, int sig) { return (masks.caught & bit(sig)) && !(masks.blocked & bit(sig)); }

bool handler_done(const SignalMasks& masks, int sig) { return !(masks.pending & bit(sig)) && !(masks.blocked & bit(sig)); }

std::optional<std::string> faulthandler_frame(std::string_view line) {
  // '  File "/path/x.py", line 12 in name'; a file name with a '"' in it is written as is.
  constexpr std::string_view kFile = "  File \"";
  if (line.substr(0, kFile.size()) != kFile) return std::nullopt;
  const std::size_t quote = line.rfind("\", line ");
  if (quote == std::string_view::npos || quote < kFile.size()) return std::nullopt;
  const std::string_view file = line.substr(kFile.size(), quote - kFile.size());
  std::string_view rest = line.substr(quote + 8);
  const std::size_t in = rest.find(" in ");
  if (in == std::string_view::npos) return std::nullopt;
  return fmt::format("{} ({}:{})", rest.substr(in + 4), file, rest.substr(0, in));
}

}  // namespace ddprun::launcher
