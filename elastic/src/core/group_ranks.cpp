#include "core/group_ranks.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace ddprun::elastic {
namespace {

std::string_view digits_at(const std::string& s, std::size_t& i) {
  const std::size_t start = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  std::string_view run(s.data() + start, i - start);
  while (run.size() > 1 && run.front() == '0') run.remove_prefix(1);
  return run;
}

// "n2" < "n10" and "127.0.0.9" < "127.0.0.10": runs of digits compare as numbers. Negative,
// zero or positive as a is before, the same as, or after b: one call per field in the group-rank
// sort of 10,000 nodes, not two.
int natural_compare(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i]));
    const bool db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      const std::string_view na = digits_at(a, i), nb = digits_at(b, j);
      if (na.size() != nb.size()) return na.size() < nb.size() ? -1 : 1;
      if (const int c = na.compare(nb)) return c;
    } else {
      if (a[i] != b[j]) return a[i] < b[j] ? -1 : 1;
      ++i, ++j;
    }
  }
  const std::size_t left_a = a.size() - i, left_b = b.size() - j;
  return left_a == left_b ? 0 : left_a < left_b ? -1 : 1;
}

}  // namespace

std::vector<std::size_t> order_group_ranks(const std::vector<RankCandidate>& candidates) {
  const std::size_t n = candidates.size();
  std::vector<std::size_t> slots(n, n);  // n: free
  std::vector<std::size_t> rest;
  for (std::size_t i = 0; i < n; ++i) {
    const int r = candidates[i].node_rank;
    if (r >= 0 && static_cast<std::size_t>(r) < n && slots[r] == n) {
      slots[r] = i;
    } else {
      rest.push_back(i);
    }
  }
  std::sort(rest.begin(), rest.end(), [&](std::size_t x, std::size_t y) {
    const RankCandidate& a = candidates[x];
    const RankCandidate& b = candidates[y];
    if ((a.node_rank >= 0) != (b.node_rank >= 0)) return a.node_rank >= 0;
    if (a.node_rank != b.node_rank) return a.node_rank < b.node_rank;
    if (a.hosts_rendezvous != b.hosts_rendezvous) return a.hosts_rendezvous;
    if (const int c = natural_compare(a.hostname, b.hostname)) return c < 0;
    if (const int c = natural_compare(a.addr, b.addr)) return c < 0;
    return a.join_order < b.join_order;
  });
  auto next = rest.begin();
  for (std::size_t& slot : slots) {
    if (slot == n) slot = *next++;
  }
  return slots;
}

}  // namespace ddprun::elastic
