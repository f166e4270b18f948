#include "ddprun/chaos_spec.hpp"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "ddprun/input_limits.hpp"
#include "ddprun/parse.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::config {
namespace {

constexpr const char* kAccepted = "mtbf=SECONDS (more than 0), kinds=kill,hang,node (one or more), seed=N";

UsageError bad_chaos(std::string_view text, const std::string& why) {
  return UsageError(fmt::format("--chaos={}: {}; accepted: off, or {}", shown(text), why, kAccepted));
}

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    const std::size_t comma = text.find(',', at);
    parts.push_back(text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    if (comma == std::string_view::npos) return parts;
    at = comma + 1;
  }
}

}  // namespace

ChaosSpec parse_chaos(std::string_view text) {
  ChaosSpec spec;
  if (text.empty() || text == "off") return spec;
  bool mtbf = false, kinds = false, in_kinds = false;
  for (std::string_view part : split_commas(text)) {
    const std::size_t eq = part.find('=');
    std::string_view key = eq == std::string_view::npos ? std::string_view() : part.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? part : part.substr(eq + 1);
    if (eq == std::string_view::npos && !in_kinds) {
      throw bad_chaos(text, fmt::format("'{}' is not KEY=VALUE", shown(part)));
    }
    if (eq != std::string_view::npos) in_kinds = false;
    if (key == "mtbf") {
      const auto seconds = to_seconds(value);
      if (!seconds || *seconds <= 0) throw bad_chaos(text, fmt::format("mtbf={} is not seconds more than 0", shown(value)));
      if (mtbf) throw bad_chaos(text, "mtbf is given twice");
      spec.mtbf = *seconds;
      mtbf = true;
    } else if (key == "seed") {
      const auto n = to_integer(value);
      if (!n || *n < 0 || value.find_first_not_of("0123456789") != std::string_view::npos) {
        throw bad_chaos(text, fmt::format("seed={} is not a whole number, 0 or more", shown(value)));
      }
      if (spec.seed_given) throw bad_chaos(text, "seed is given twice");
      spec.seed = static_cast<std::uint64_t>(*n);
      spec.seed_given = true;
    } else if (key == "kinds" || (key.empty() && in_kinds)) {
      if (key == "kinds" && kinds) throw bad_chaos(text, "kinds is given twice");
      kinds = in_kinds = true;
      if (value == "kill") spec.kill = true;
      else if (value == "hang") spec.hang = true;
      else if (value == "node") spec.node = true;
      else throw bad_chaos(text, fmt::format("kinds: '{}' is not kill, hang or node", shown(value)));
    } else {
      throw bad_chaos(text, fmt::format("unknown key '{}'", shown(key)));
    }
  }
  if (!mtbf) throw bad_chaos(text, "mtbf is missing");
  if (!kinds) spec.kill = true;
  return spec;
}

std::string chaos_text(const ChaosSpec& s) {
  if (!s.on()) return "off";
  std::string kinds;
  const std::pair<bool, const char*> words[] = {{s.kill, "kill"}, {s.hang, "hang"}, {s.node, "node"}};
  for (const auto& [on, word] : words) {
    if (on) kinds += (kinds.empty() ? "" : ",") + std::string(word);
  }
  return fmt::format("mtbf={},kinds={},seed={}", s.mtbf, kinds, s.seed);
}

std::uint64_t chaos_seed_of(std::string_view run_id) {
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a, 64 bits
  for (unsigned char c : run_id) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h >> 1;  // fits a long long: seed=N reads it back
}

}  // namespace ddprun::config
