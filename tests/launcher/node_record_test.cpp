#include <doctest/doctest.h>

#include "report/node_record.hpp"

using namespace ddprun;
using namespace ddprun::launcher;

TEST_CASE("a fresh record counts every kind of the vocabulary from 0") {
  const NodeRecord record;
  CHECK(record.failures_by_kind.size() == all_failure_kinds().size());
  CHECK(record.failures_by_kind.at("segfault") == 0);
  CHECK(record.failures_by_kind.at("hang") == 0);
}

TEST_CASE("quarantined nodes are new once") {
  NodeRecord record;
  const elastic::QuarantinedNode a{"a (10.0.0.1)", "2 segfaults"};
  const elastic::QuarantinedNode b{"b (10.0.0.2)", "2 nccl errors"};
  CHECK(note_quarantined(record, {a}).size() == 1);
  CHECK(note_quarantined(record, {a}).empty());
  const auto fresh = note_quarantined(record, {a, b});
  REQUIRE(fresh.size() == 1);
  CHECK(fresh[0].node == "b (10.0.0.2)");
  CHECK(note_quarantined(record, {}).empty());  // an older, shorter list changes nothing
  CHECK(record.quarantined.size() == 2);
}

TEST_CASE("the live view from the record, as a table") {
  const NodeSettings settings{"node7", "job-from-flag", 3};
  NodeRecord waiting;
  NodeRecord spare;
  spare.spare_place = 2;
  NodeRecord running;
  running.round_assigned = true;
  running.round.round = 4;
  running.round.run_id = "job-from-host";
  running.round.group_world_size = 2;
  running.round.group_rank = 1;
  running.round.world_size = 8;
  running.round.restart_count = 1;
  running.attempts_started = 2;
  running.hangs_found = 1;
  running.quarantined = {{"h3 (10.0.0.3)", "2 segfaults"}};

  struct Row {
    const char* name;
    const NodeRecord& record;
    const char* phase;
    bool hang_reported;
    const char* phase_shown;
    const char* run_id;
    int nodes;
    int node_rank;
    int attempt;
    bool hung;
  };
  const Row rows[] = {
      {"before the first round", waiting, "waiting", false, "waiting", "job-from-flag", 0, -1, -1, false},
      {"a spare", spare, "waiting", false, "spare", "job-from-flag", 0, -1, -1, false},
      {"running", running, "running", false, "running", "job-from-host", 2, 1, 1, false},
      {"stopping after a hang", running, "stopping", true, "stopping", "job-from-host", 2, 1, 1, true},
      {"waiting after a hang", running, "waiting", true, "waiting", "job-from-host", 2, 1, 1, false},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const JobView v = job_view(row.record, row.phase, settings, 10, row.hang_reported, {RankView{}});
    CHECK(v.phase == row.phase_shown);
    CHECK(v.run_id == row.run_id);
    CHECK(v.nodes == row.nodes);
    CHECK(v.node_rank == row.node_rank);
    CHECK(v.attempt == row.attempt);
    CHECK(v.hung.empty() == !row.hung);
    CHECK(v.host == "node7");
    CHECK(v.max_restarts == 3);
    CHECK(v.hang_timeout == 10);
    CHECK(v.ranks.size() == 1);
    CHECK(v.quarantined.size() == row.record.quarantined.size());
    CHECK(v.hangs_found == row.record.hangs_found);
  }
}
