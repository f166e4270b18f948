#include "core/restart_policy.hpp"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "ddprun/failure_text.hpp"

namespace ddprun::elastic {

RestartPolicy::RestartPolicy(int max_restarts, RestartSettings settings, int restarts_used, double now)
    : max_restarts_(max_restarts), settings_(settings), restarts_(static_cast<std::size_t>(std::max(restarts_used, 0)), now) {}

int RestartPolicy::restarts_counted(double now) const {
  if (settings_.window <= 0) return static_cast<int>(restarts_.size());
  return static_cast<int>(std::count_if(restarts_.begin(), restarts_.end(),
                                        [&](double at) { return at > now - settings_.window; }));
}

RestartPolicy::History RestartPolicy::history() const {
  return {std::vector<double>(restarts_.begin(), restarts_.end()), no_progress_, last_exception_, last_counted_};
}

void RestartPolicy::restore(const History& history) {
  restarts_.assign(history.restarts.begin(), history.restarts.end());
  no_progress_ = history.no_progress;
  last_exception_ = history.last_exception;
  last_counted_ = history.last_counted;
}

namespace {

// What the crash-loop breaker compares: the kind, and the place where there is one.
std::string kind_and_place(const WorkerFailure& f) {
  return f.location.empty() ? f.kind.name() : fmt::format("{} at {}", f.kind.name(), f.location);
}

}  // namespace

RestartDecision RestartPolicy::decide(const WorkerFailure& root, bool progressed, double now) {
  const std::string exception = root.kind.is(FailureKind::kPythonException) && !root.exception.empty()
                                    ? fmt::format("{} at {}", root.exception, root.location)
                                    : "";
  // A kill from outside says nothing of the workers' code: it leaves the counts as they were.
  const bool from_outside = root.kind.is(FailureKind::kKilled);
  const bool same_again = !progressed && !exception.empty() && exception == last_exception_;
  if (progressed) {
    no_progress_ = 0;
    last_counted_.clear();
  } else if (!from_outside) {
    const std::string counted_as = kind_and_place(root);
    no_progress_ = counted_as == last_counted_ ? no_progress_ + 1 : 1;
    last_counted_ = counted_as;
  }
  if (!from_outside) last_exception_ = exception;
  const bool counts = !progressed && !from_outside;  // toward the crash loop, with a backoff
  if (settings_.window > 0) {
    while (!restarts_.empty() && restarts_.front() <= now - settings_.window) restarts_.pop_front();
  }

  RestartDecision d;
  const int counted = restarts_counted(now);
  if (counted >= max_restarts_) {
    d.budget_spent = true;
    if (max_restarts_ > 0) {
      d.reason = settings_.window > 0
                     ? fmt::format("not restarting: the {} restarts of --max_restarts within --restart_window={:g} s "
                                   "are spent",
                                   max_restarts_, settings_.window)
                     : fmt::format("not restarting: the {} restarts of --max_restarts are spent", max_restarts_);
    }
    return d;
  }
  if (!settings_.restart_on_any && !root.retryable) {
    d.reason = fmt::format("not restarting: {}: running the same code again cannot fix a {}; --restart_on=any "
                           "restarts it anyway",
                           describe_kind(root), root.kind.name());
    return d;
  }
  if (!settings_.restart_on_any && same_again) {
    d.reason = fmt::format("not restarting: {}: the same {} twice in a row with no progress in between; "
                           "--restart_on=any restarts it anyway",
                           describe_kind(root), exception);
    return d;
  }
  if (counts && settings_.crash_loop_limit > 0 && no_progress_ >= settings_.crash_loop_limit) {
    d.reason = fmt::format("crash loop: {} failures in a row with no progress since their start (last: {}); "
                           "fix the cause, or raise --crash_loop_limit (0: never stop)",
                           no_progress_, describe_kind(root));
    return d;
  }
  d.restart = true;
  restarts_.push_back(now);
  // 1, 2, 4 ... s: a shift, not std::ldexp, which would make ddprun load libm for this alone.
  if (counts) {
    d.backoff = std::min(static_cast<double>(1L << std::clamp(no_progress_ - 1, 0, 30)), settings_.backoff_max);
  }
  d.why = RestartReason{counted + 1,
                        max_restarts_,
                        settings_.window,
                        describe_kind(root),
                        counts ? no_progress_ : 0,
                        settings_.crash_loop_limit,
                        d.backoff,
                        {}};
  return d;
}

}  // namespace ddprun::elastic
