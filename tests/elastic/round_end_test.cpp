// decide_round_end() as tables: the root cause, the restart budget after a failure, the
// membership budget after joins and leaves. Each end is rendered as one line.
#include "core/round_end.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace ddprun::elastic {
namespace {

WorkerFailure failure(int rank, double at, bool consequence = false) {
  WorkerFailure f;
  f.rank = rank;
  f.exit_code = 10 + rank;
  f.timestamp = at;
  f.traceback = fmt::format("tb{}", rank);
  if (consequence) f.kind = FailureKind::kConsequence;
  return f;
}

std::string ranks(const std::vector<WorkerFailure>& failures) {
  std::string text;
  for (const WorkerFailure& f : failures) text += (text.empty() ? "" : ",") + std::to_string(f.rank);
  return text;
}

TEST_CASE("the root cause: the earliest failure that is not a consequence of another") {
  struct Case {
    std::string name;
    std::vector<WorkerFailure> failures;
    std::size_t root;
    std::string order;
  };
  const std::vector<Case> cases = {
      {"one", {failure(0, 5)}, 0, "0"},
      {"the earliest", {failure(0, 5), failure(1, 3), failure(2, 4)}, 1, "1,2,0"},
      {"a consequence last, even when it came first", {failure(0, 1, true), failure(1, 3)}, 1, "1,0"},
      {"only consequences: the earliest of them", {failure(0, 2, true), failure(1, 1, true)}, 1, "1,0"},
      {"ties keep their reported order", {failure(0, 3), failure(1, 3)}, 0, "0,1"},
  };
  for (Case c : cases) {
    CAPTURE(c.name);
    CHECK(order_by_cause(c.failures) == c.root);
    CHECK(ranks(c.failures) == c.order);
  }
}

std::string render(const RoundEnd& end) {
  if (end.finish) {
    const JobOutcome& o = *end.finish;
    std::string tracebacks;
    for (const WorkerFailure& f : o.failures) tracebacks += f.traceback.empty() ? "-" : f.traceback;
    return fmt::format("finish exit={} restarts={} failures={} tracebacks={} retryable={}{}{}", o.exit_code, o.restarts,
                       ranks(o.failures), tracebacks, o.retryable, o.error.empty() ? "" : " error=", o.error);
  }
  if (end.root) {
    return fmt::format("restart count={} root=rank {} of node {} backoff={:g}", end.restart_count, end.root->rank,
                       end.root_node, end.backoff);
  }
  return fmt::format("next round count={} changes={}", end.restart_count, end.membership_changes);
}

TEST_CASE("the end of a round") {
  struct Case {
    std::string name;
    int max_restarts;
    int restart_count;  // before the round ended
    std::vector<WorkerFailure> failures;
    std::vector<NodeId> nodes;
    double ran_for;
    int changes;  // membership changes in a row before it
    std::string end;
  };
  const std::vector<Case> cases = {
      {"a failure within the budget restarts, the root cause judged on its node; no progress: a backoff",
       2,
       0,
       {failure(0, 5), failure(1, 3)},
       {7, 8},
       1,
       0,
       "restart count=1 root=rank 1 of node 8 backoff=1"},
      {"a failure with the budget spent finishes with the root cause's exit and traceback only",
       1,
       1,
       {failure(0, 5), failure(1, 3)},
       {7, 8},
       1,
       0,
       "finish exit=11 restarts=1 failures=1,0 tracebacks=tb1- retryable=true"},
      {"a membership change after the last-call window is progress: free, and the run starts again",
       0,
       0,
       {},
       {},
       30,
       5,
       "next round count=0 changes=1"},
      {"a quick change is free up to max_membership_changes", 0, 0, {}, {}, 1, 1, "next round count=0 changes=2"},
      {"one more costs a restart", 1, 0, {}, {}, 1, 2, "next round count=1 changes=3"},
      {"and with the budget spent ends the job",
       1,
       1,
       {},
       {},
       1,
       2,
       "finish exit=69 restarts=1 failures= tracebacks= retryable=true error=3 rounds in a row ended by nodes joining "
       "or leaving within 30 s of their start (last: n2 joined), more than max_membership_changes=2, and the 1 "
       "restarts of --max_restarts are spent; raise --rdzv_conf max_membership_changes or --max_restarts"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    JobSettings settings;
    settings.max_restarts = c.max_restarts;
    settings.max_membership_changes = 2;
    settings.last_call_timeout = 30;
    RoundEndCase in(RestartPolicy(c.max_restarts, settings.restart, c.restart_count, 0));
    in.failures = c.failures;
    in.failure_nodes = c.nodes;
    in.now = 100;
    in.ran_for = c.ran_for;
    in.restart_count = c.restart_count;
    in.membership_changes = c.changes;
    in.stop_why = "n2 joined";
    CHECK(render(decide_round_end(in, settings)) == c.end);
  }
}

}  // namespace
}  // namespace ddprun::elastic
