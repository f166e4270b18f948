#include <doctest/doctest.h>

#include "report/node_record.hpp"
#include "report/node_wait.hpp"

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

TEST_CASE("a node whose workers are done waits for the round's other nodes: the line and the view") {
  const NodeSettings settings{"node7", "job", 3};
  NodeRecord record;
  record.round_assigned = true;
  record.round.round = 5;
  record.round.group_world_size = 4;
  record.round.group_rank = 1;
  const auto waiting_for = [&](const char* phase) {
    return job_view(record, phase, settings, 0, false, {}).waiting_for_nodes;
  };
  CHECK(waiting_for("waiting").empty());  // not done yet: waits for a round
  record.done_round = 5;
  CHECK(waiting_for("waiting") == std::vector<int>{0, 2, 3});
  CHECK(waiting_for("exiting").empty());
  CHECK(done_waiting_line(record.round) ==
        "ddprun: this node's workers are done (round 5); waiting for the other 3 nodes of the round (group ranks 0, 2, "
        "3) to finish theirs\n");
  record.round.round = 6;  // a new round: no longer done
  CHECK(waiting_for("waiting").empty());
  record.round.group_world_size = 2;
  record.round.group_rank = 0;
  CHECK(done_waiting_line(record.round) ==
        "ddprun: this node's workers are done (round 6); waiting for the other 1 node of the round (group rank 1) to "
        "finish theirs\n");
  record.round.group_world_size = 1;
  CHECK(done_waiting_line(record.round).empty());
}
