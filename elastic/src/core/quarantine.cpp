#include "core/quarantine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace ddprun::elastic {

std::vector<SuspectFailure> counted_failures(const QuarantineSettings& settings, std::vector<SuspectFailure> failures,
                                             SuspectFailure latest) {
  failures.push_back(std::move(latest));
  const double since = failures.back().at - settings.window;
  failures.erase(failures.begin(),
                 std::find_if(failures.begin(), failures.end(), [&](const SuspectFailure& f) { return f.at >= since; }));
  const std::size_t keep = static_cast<std::size_t>(std::max(settings.after, 1));
  if (failures.size() > keep) failures.erase(failures.begin(), failures.end() - static_cast<std::ptrdiff_t>(keep));
  return failures;
}

QuarantineDecision decide_quarantine(const QuarantineCase& c) {
  QuarantineDecision d;
  const QuarantineSettings& s = c.settings;
  if (s.after <= 0 || c.failures.empty()) return d;
  const double since = c.failures.back().at - s.window;
  std::vector<std::string> kinds;
  for (const SuspectFailure& f : c.failures) {
    if (f.at >= since) kinds.push_back(f.kind.name());
  }
  if (static_cast<int>(kinds.size()) < s.after) return d;
  d.suspect = true;
  d.why = fmt::format("its workers were the root cause of {} hardware-like failures within {:g} s ({})", kinds.size(),
                      s.window, fmt::join(kinds, ", "));
  if (c.runs_rendezvous) {
    d.why += "; kept, since it runs the job's rendezvous";
  } else if (c.nodes_without < c.min_nodes) {
    d.why += fmt::format("; kept, since the job would have {} node{} without it, fewer than --nnodes MIN {}, and no spare",
                         c.nodes_without, c.nodes_without == 1 ? "" : "s", c.min_nodes);
  } else {
    d.quarantine = true;
  }
  return d;
}

}  // namespace ddprun::elastic
