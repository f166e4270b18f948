#include "core/round_end.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "core/node_identity.hpp"

namespace ddprun::elastic {

std::size_t order_by_cause(std::vector<WorkerFailure>& failures) {
  const auto by_cause = [](const WorkerFailure& a, const WorkerFailure& b) {
    const bool ca = a.kind.consequence(), cb = b.kind.consequence();
    if (ca != cb) return cb;
    return a.timestamp < b.timestamp;
  };
  // The first of the least, as stable_sort puts first.
  const auto root = static_cast<std::size_t>(std::min_element(failures.begin(), failures.end(), by_cause) -
                                             failures.begin());
  std::stable_sort(failures.begin(), failures.end(), by_cause);
  return root;
}

RoundEnd decide_round_end(RoundEndCase c, const JobSettings& settings) {
  RoundEnd end(std::move(c.policy));
  end.restart_count = c.restart_count;
  end.membership_changes = c.membership_changes;
  if (!c.failures.empty()) {
    const NodeId root_node = c.failure_nodes.at(order_by_cause(c.failures));
    const bool progressed = std::any_of(c.failures.begin(), c.failures.end(),
                                        [](const WorkerFailure& f) { return f.progressed; });
    const RestartDecision decision = end.policy.decide(c.failures.front(), progressed, c.now);
    if (!decision.restart) {
      JobOutcome failure;
      failure.failures = std::move(c.failures);
      failure.exit_code = failure.failures.front().exit_code;
      // Only the root cause's traceback is shown; the others would only swell the finish
      // message, which holds every failure of the job.
      for (auto it = std::next(failure.failures.begin()); it != failure.failures.end(); ++it) it->traceback.clear();
      failure.restarts = c.restart_count;
      failure.stop_reason = decision.reason;
      failure.retryable = decision.budget_spent && failure.failures.front().retryable;
      end.finish = std::move(failure);
      return end;
    }
    ++end.restart_count;
    end.restart_reason = decision.why;
    end.backoff = decision.backoff;
    end.root = std::move(c.failures.front());
    end.root_node = root_node;
    return end;
  }
  // Nodes joined or left. A round that ran for the last-call window counts as progress; a run of
  // quicker changes (a flapping node, or one joining and leaving on purpose) is free only up to
  // max_membership_changes, then costs restarts like a failure.
  end.membership_changes = c.ran_for >= settings.last_call_timeout ? 1 : c.membership_changes + 1;
  if (end.membership_changes > settings.max_membership_changes) {
    if (c.restart_count >= settings.max_restarts) {
      end.finish = rendezvous_failure(
          fmt::format("{} rounds in a row ended by nodes joining or leaving within {} s of their start (last: {}), "
                      "more than max_membership_changes={}, and the {} restarts of --max_restarts are spent; raise "
                      "--rdzv_conf max_membership_changes or --max_restarts",
                      end.membership_changes, settings.last_call_timeout, c.stop_why, settings.max_membership_changes,
                      settings.max_restarts),
          c.restart_count);
      return end;
    }
    ++end.restart_count;
  }
  return end;
}

}  // namespace ddprun::elastic
