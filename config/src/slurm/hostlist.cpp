#include "ddprun/hostlist.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"

namespace ddprun::slurm {
namespace {

bool is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }

// Parses and expands one list; `list` is kept whole so every error can quote it.
class Expander {
 public:
  explicit Expander(std::string_view list) : list_(list) {}

  std::vector<std::string> run() {
    std::size_t item_begin = 0;
    std::size_t open = std::string_view::npos;  // offset of the '[' we are inside, if any
    for (std::size_t i = 0; i <= list_.size(); ++i) {
      const bool end = i == list_.size();
      const char c = end ? ',' : list_[i];
      if (c == '[') {
        if (open != std::string_view::npos) fail(fmt::format("'[' at offset {} is nested in the '[' at offset {}", i, open));
        open = i;
      } else if (c == ']') {
        if (open == std::string_view::npos) fail(fmt::format("']' at offset {} has no matching '['", i));
        open = std::string_view::npos;
      } else if (end && open != std::string_view::npos) {
        fail(fmt::format("'[' at offset {} is never closed", open));
      } else if (open == std::string_view::npos && is_separator(c)) {
        if (i > item_begin) expand_item(item_begin, i);
        item_begin = i + 1;
      }
    }
    if (hosts_.empty()) fail("it names no host");
    return std::move(hosts_);
  }

 private:
  // One item of the list: literal text and bracket groups, already known to be balanced.
  void expand_item(std::size_t begin, std::size_t end) {
    std::vector<std::vector<std::string>> parts;  // each part: the texts it can stand for
    std::vector<std::size_t> groups;              // indices of the bracket groups in parts
    std::size_t count = 1;
    std::size_t i = begin;
    while (i < end) {
      if (list_[i] == '[') {
        const std::size_t close = list_.find(']', i);
        groups.push_back(parts.size());
        parts.push_back(expand_group(i + 1, close));
        count *= parts.back().size();  // cannot overflow: each factor and the product are bounded
        if (count > kMaxHosts || hosts_.size() + count > kMaxHosts) {
          fail(fmt::format("it expands to more than {} hosts", kMaxHosts));
        }
        i = close + 1;
      } else {
        const std::size_t next = std::min(list_.find('[', i), end);
        parts.push_back({std::string(list_.substr(i, next - i))});
        i = next;
      }
    }
    // Odometer over the groups. scontrol varies the last group fastest, then the first, the
    // second, ...: n[1-2]-r[1-2]-c[1-2] gives n1-r1-c1 n1-r1-c2 n2-r1-c1 n2-r1-c2 n1-r2-c1 ...
    // With one or two groups that is plain leftmost-slowest order.
    // `groups` becomes the order in which they advance, fastest first.
    if (!groups.empty()) std::rotate(groups.begin(), groups.end() - 1, groups.end());
    std::vector<std::size_t> pick(parts.size(), 0);
    for (std::size_t n = 0; n < count; ++n) {
      std::string host;
      for (std::size_t p = 0; p < parts.size(); ++p) host += parts[p][pick[p]];
      if (host.size() > kMaxHostNameChars) {
        fail(fmt::format("host \"{}\" is longer than {} characters", shown(host), kMaxHostNameChars));
      }
      expanded_chars_ += host.size();
      if (expanded_chars_ > kMaxHostlistChars) {
        fail(fmt::format("it expands to more than {} characters", kMaxHostlistChars));
      }
      hosts_.push_back(std::move(host));
      for (std::size_t g : groups) {
        if (++pick[g] < parts[g].size()) break;
        pick[g] = 0;
      }
    }
  }

  // The inside of one bracket group, [begin, end): comma-separated N or N-M.
  std::vector<std::string> expand_group(std::size_t begin, std::size_t end) {
    std::vector<std::string> out;
    std::size_t range_begin = begin;
    for (std::size_t i = begin; i <= end; ++i) {
      if (i < end && list_[i] != ',') continue;
      expand_range(range_begin, i, out);
      if (out.size() > kMaxHosts) fail(fmt::format("it expands to more than {} hosts", kMaxHosts));
      range_begin = i + 1;
    }
    return out;
  }

  void expand_range(std::size_t begin, std::size_t end, std::vector<std::string>& out) {
    const std::string_view range = list_.substr(begin, end - begin);
    if (range.empty()) fail(fmt::format("empty range at offset {}", begin));
    const std::size_t dash = range.find('-');
    const std::string_view lo_text = range.substr(0, dash);
    const std::string_view hi_text = dash == std::string_view::npos ? lo_text : range.substr(dash + 1);
    const std::uint64_t lo = parse_number(lo_text, range, begin);
    const std::uint64_t hi = parse_number(hi_text, range, begin);
    if (lo > hi) fail(fmt::format("range \"{}\" at offset {} decreases", shown(range), begin));
    if (hi - lo >= kMaxHostsPerRange) {
      fail(fmt::format("range \"{}\" at offset {} has more than {} hosts", shown(range), begin, kMaxHostsPerRange));
    }
    const std::size_t width = lo_text.size();
    for (std::uint64_t v = lo;; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out.push_back(std::move(digits));
      if (v == hi) break;
    }
  }

  std::uint64_t parse_number(std::string_view text, std::string_view range, std::size_t offset) {
    if (text.empty()) fail(fmt::format("range \"{}\" at offset {} is not N or N-M", shown(range), offset));
    std::uint64_t value = 0;
    for (char c : text) {
      if (c < '0' || c > '9') fail(fmt::format("range \"{}\" at offset {} is not N or N-M", shown(range), offset));
      const unsigned digit = static_cast<unsigned>(c - '0');
      if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
        fail(fmt::format("number \"{}\" at offset {} is too large", shown(text), offset));
      }
      value = value * 10 + digit;
    }
    return value;
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw HostlistError(fmt::format("invalid hostlist \"{}\": {}", shown(list_), problem));
  }

  std::string_view list_;
  std::vector<std::string> hosts_;
  std::size_t expanded_chars_ = 0;
};

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view hostlist) { return Expander(hostlist).run(); }

}  // namespace ddprun::slurm
