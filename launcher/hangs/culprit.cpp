#include "hangs/culprit.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace ddprun::launcher {
namespace {

// "rank 3" or "ranks 0, 2".
std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  return text;
}

std::string collective(const std::string& op, long long number) {
  return fmt::format("{} #{}", op.empty() ? "collective" : op, number);
}

// Where a rank that has not entered the awaited collective is, by its record.
std::string whereabouts(const RankCollectives& r) {
  if (!r.coll || *r.coll == 0) return "no collective entered yet";
  return fmt::format("{} {}", r.in ? "still in" : "last in", collective(r.op, *r.coll));
}

}  // namespace

RankCollectives rank_collectives(int rank, const ProgressRecord& record) {
  return {rank, record.collectives, record.in_collective.value_or(false), record.collective};
}

std::optional<Culprits> find_culprits(const std::vector<RankCollectives>& ranks) {
  std::vector<RankCollectives> sorted = ranks;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  const RankCollectives* latest = nullptr;  // the latest collective a rank waits in
  for (const auto& r : sorted) {
    if (r.in && r.coll && (latest == nullptr || *r.coll > *latest->coll)) latest = &r;
  }
  if (latest == nullptr) return std::nullopt;
  Culprits c;
  c.waited = *latest->coll;
  std::vector<const RankCollectives*> behind;
  for (const auto& r : sorted) {
    if (r.coll.value_or(0) < c.waited) {
      behind.push_back(&r);
      c.ranks.push_back(r.rank);
    } else if (r.in && *r.coll == c.waited) {
      c.waiting.push_back(r.rank);
    }
  }
  const std::string waited = collective(latest->op, c.waited);
  c.why = fmt::format("{} {} in {}; ", ranks_text(c.waiting), c.waiting.size() == 1 ? "waits" : "wait", waited);
  if (behind.empty() && latest->op == "ddp_backward") {
    // A DDP backward pass is a collective from its start, before its gradients' all-reduce.
    c.why += "every rank on this node entered it (the rank they wait for is on another node, or stuck in its own "
             "backward pass before its all-reduce: see the stacks)";
  } else if (behind.empty()) {
    c.why += "every rank on this node entered it (the rank they wait for is on another node, or the collective "
             "itself is stuck)";
  } else if (behind.size() == 1) {
    c.why += fmt::format("{} has not entered it: {}", ranks_text(c.ranks), whereabouts(*behind.front()));
  } else {
    c.why += fmt::format("{} have not entered it:", ranks_text(c.ranks));
    for (size_t i = 0; i < behind.size(); ++i) {
      c.why += fmt::format("{} rank {} {}", i ? "," : "", behind[i]->rank, whereabouts(*behind[i]));
    }
  }
  return c;
}

}  // namespace ddprun::launcher
