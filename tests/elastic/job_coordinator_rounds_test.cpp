// JobCoordinator's rounds as tables: when a round starts and with which ranks, the join
// timeout, failures and the root cause, lost and joining nodes, hot spares, membership changes,
// the exit barrier, close_timeout, stale messages, and a job of many nodes.
#include "job_coordinator_script.hpp"

namespace ddprun::elastic {
namespace {

TEST_CASE("a static job starts when every node has joined, ranks ordered by hostname") {
  play(job(2, 2), {
      {"join 2", {}},
      {"join 1", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
  });
}

TEST_CASE("node_rank is honoured and names the master; nodes may differ in nproc") {
  play(job(3, 3), {
      {"join 1 rank=2 nproc=1", {}},
      {"join 2 rank=0 nproc=4", {}},
      {"join 3 rank=1 nproc=2", {"n2 assign round=1 restarts=0 group=0/3 ranks=0/7 master=10.0.0.2:1002",
                                 "n3 assign round=1 restarts=0 group=1/3 ranks=4/7 master=10.0.0.2:1002",
                                 "n1 assign round=1 restarts=0 group=2/3 ranks=6/7 master=10.0.0.2:1002"}},
  });
}

TEST_CASE("the node of rank 0 decides whether the workers use its launcher's store") {
  play(job(2, 2), {
      {"join 1 rank=1", {}},
      {"join 2 rank=0 agent_store",
       {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002 agent_store",
        "n1 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002 agent_store"}},
  });
  play(job(2, 2), {
      {"join 1 rank=1 agent_store", {}},
      {"join 2 rank=0", {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002",
                         "n1 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002"}},
  });
}

TEST_CASE("every assignment lists the round's snapshot replicators in group-rank order, when every node has one") {
  play(job(3, 3), {
      {"join 1 rank=2 snap", {}},
      {"join 2 rank=0 snap", {}},
      {"join 3 rank=1 snap",
       {"n2 assign round=1 restarts=0 group=0/3 ranks=0/6 master=10.0.0.2:1002 ring=a2@10.0.0.2:2002,a3@10.0.0.3:2003,a1@10.0.0.1:2001",
        "n3 assign round=1 restarts=0 group=1/3 ranks=2/6 master=10.0.0.2:1002 ring=a2@10.0.0.2:2002,a3@10.0.0.3:2003,a1@10.0.0.1:2001",
        "n1 assign round=1 restarts=0 group=2/3 ranks=4/6 master=10.0.0.2:1002 ring=a2@10.0.0.2:2002,a3@10.0.0.3:2003,a1@10.0.0.1:2001"}},
  });
  // A node without one (--snapshot=off there, no secret): the round replicates nothing.
  play(job(2, 2), {
      {"join 1 snap", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
  });
}

TEST_CASE("a round of more than kMaxSnapshotRing nodes replicates nothing: the list would go to every node") {
  for (const int nodes : {kMaxSnapshotRing, kMaxSnapshotRing + 1}) {
    CAPTURE(nodes);
    Script s(job(nodes, nodes));
    for (int n = 1; n < nodes; ++n) REQUIRE(s.run(fmt::format("join {} rank={} snap", n, n - 1)).empty());
    REQUIRE(s.run(fmt::format("join {} rank={} snap", nodes, nodes - 1)).size() == static_cast<std::size_t>(nodes));
    const auto& first = std::get<Assign>(s.last().front()).assignment;
    CHECK(first.snapshot_peers.size() == (nodes <= kMaxSnapshotRing ? static_cast<std::size_t>(nodes) : 0u));
  }
}

TEST_CASE("a dynamic job starts MIN nodes after the last call, or MAX nodes at once") {
  SUBCASE("last call") {
    Script s(job(2, 4));
    CHECK(s.run("join 1") == Lines{});
    CHECK(s.coordinator().next_deadline() == 600.0);  // the join timeout, while below MIN
    CHECK(s.run("@5 join 2") == Lines{});
    CHECK(s.coordinator().next_deadline() == 35.0);  // MIN reached at 5: last call until 35
    CHECK(s.run("@34.9 tick") == Lines{});
    CHECK(s.run("@35 tick") == Lines{"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                                     "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"});
    CHECK(s.coordinator().next_deadline() == std::nullopt);
  }
  SUBCASE("MAX at once") {
    play(job(1, 2), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
    });
  }
  SUBCASE("a node leaving during the last call ends it") {
    Script s(job(2, 4));
    s.run("join 1");
    s.run("@5 join 2");
    CHECK(s.run("@6 gone 2") == Lines{});
    CHECK(s.coordinator().next_deadline() == 600.0);
    CHECK(s.run("@7 join 3") == Lines{});
    CHECK(s.coordinator().next_deadline() == 37.0);
  }
}

TEST_CASE("the join timeout finishes the job with a message naming what was expected and seen") {
  play(job(3, 3), {
      {"join 1", {}},
      {"join 2", {}},
      {"@599 tick", {}},
      {"@600 tick",
       {"n1 finish exit=69 restarts=0 error=timed out after 600 s waiting for 3 nodes to join round 1 of rendezvous "
        "'job' (have 2: h1 (10.0.0.1), h2 (10.0.0.2)); start the missing nodes or raise --rdzv_conf "
        "join_timeout=SECONDS",
        "n2 finish exit=69 restarts=0 error=timed out after 600 s waiting for 3 nodes to join round 1 of rendezvous "
        "'job' (have 2: h1 (10.0.0.1), h2 (10.0.0.2)); start the missing nodes or raise --rdzv_conf "
        "join_timeout=SECONDS"}},
      {"join 3", {"n3 finish exit=69 restarts=0 error=rendezvous 'job' has already finished; start a new job with "
                  "another --rdzv_id"}},
  });
}

TEST_CASE("a worker failure stops every other node and restarts all within the job-wide budget") {
  play(job(2, 2, /*max_restarts=*/1), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 2 1", {"n1 stop round=1 worker_failed: " + kFail2}},
      {"stopped 1 1", {}},
      {"stopped 2 1", {"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                       "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@20 fail 1 2 exit=7", {"n2 stop round=2 worker_failed: worker rank 10 (local rank 0) on h1 failed with exit "
                               "code 7"}},
      {"stopped 2 2", {}},
      {"stopped 1 2", {"n1 finish exit=7 restarts=1 failure=h1:10:7 stop=" + kSpent1, "n2 finish exit=7 restarts=1 failure=h1:10:7 stop=" + kSpent1}},
  });
}

TEST_CASE("the root cause is the earliest failure on any node, whichever is reported first") {
  play(job(2, 2), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 1 1 exit=2 at=10.5", {"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed "
                                       "with exit code 2"}},
      {"fail 2 1 exit=9 at=10.2", {}},  // raced with the stop: counts, but stops nobody again
      {"stopped 1 1 fail=11:3:10.7", {}},
      {"stopped 2 1", {"n1 finish exit=9 restarts=0 failure=h2:20:9 failure=h1:10:2 failure=h1:11:3",
                       "n2 finish exit=9 restarts=0 failure=h2:20:9 failure=h1:10:2 failure=h1:11:3"}},
  });
}

TEST_CASE("the job's outcome keeps the root cause's traceback only") {
  play(job(2, 2), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 1 1 exit=2 at=10.5 tb", {"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed "
                                          "with exit code 2"}},
      {"stopped 1 1 fail=11:3:10.1:tb", {}},
      {"stopped 2 1 fail=20:9:10.7:tb", {"n1 finish exit=3 restarts=0 failure=h1:11:3:tb failure=h1:10:2 failure=h2:20:9",
                                         "n2 finish exit=3 restarts=0 failure=h1:11:3:tb failure=h1:10:2 failure=h2:20:9"}},
  });
}

TEST_CASE("a lost node stops the others, who go on without it while MIN remain, using no budget") {
  play(job(2, 3), {
      {"join 1", {}},
      {"join 2", {}},
      {"join 3", {"n1 assign round=1 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                  "n3 assign round=1 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
      {"gone 1", {"n2 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection",
                  "n3 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection"}},
      {"stopped 2 1", {}},
      {"stopped 3 1", {"n2 assign round=2 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002",
                       "n3 assign round=2 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002"}},
      {"succeeded 2 2", {}},
      {"succeeded 3 2", {"n2 finish exit=0 restarts=0", "n3 finish exit=0 restarts=0"}},
  });
}

TEST_CASE("below MIN the survivors wait for a replacement, up to the join timeout") {
  SUBCASE("a replacement takes the lost node's rank") {
    play(job(2, 2), {
        {"join 1 rank=0", {}},
        {"join 2 rank=1", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                           "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@10 gone 1", {"n2 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection"}},
        {"stopped 2 1", {}},
        {"@50 join 3 rank=0", {"n3 assign round=2 restarts=0 group=0/2 ranks=0/4 master=10.0.0.3:1003",
                               "n2 assign round=2 restarts=0 group=1/2 ranks=2/4 master=10.0.0.3:1003"}},
    });
  }
  SUBCASE("none comes") {
    play(job(2, 2), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@10 gone 1", {"n2 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection"}},
        {"@11 stopped 2 1", {}},
        {"@610 tick", {}},
        {"@611 tick", {"n2 finish exit=69 restarts=0 error=timed out after 600 s waiting for 2 nodes to join round 2 "
                       "of rendezvous 'job' (have 1: h2 (10.0.0.2)); start the missing nodes or raise --rdzv_conf "
                       "join_timeout=SECONDS"}},
    });
  }
}

TEST_CASE("a node joining a running job is admitted in the next round, using no budget") {
  play(job(2, 3), {
      {"join 1", {}},
      {"join 2", {}},
      {"@30 tick", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"join 3", {"n1 stop round=1 membership_change: node h3 (10.0.0.3) joined; admitting it in the next round",
                  "n2 stop round=1 membership_change: node h3 (10.0.0.3) joined; admitting it in the next round"}},
      {"stopped 1 1", {}},
      {"stopped 2 1", {"n1 assign round=2 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                       "n2 assign round=2 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                       "n3 assign round=2 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
      {"join 4", {"n4 spare 1: " + kSpareOf3 + "1 and takes the place of a node that is lost"}},  // full: waits, and replaces the next node lost
      {"gone 2", {"n1 stop round=2 node_lost: node h2 (10.0.0.2) was lost: it closed the connection",
                  "n3 stop round=2 node_lost: node h2 (10.0.0.2) was lost: it closed the connection"}},
      {"stopped 1 2", {}},
      {"stopped 3 2", {"n1 assign round=3 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                       "n3 assign round=3 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                       "n4 assign round=3 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
  });
}

TEST_CASE("hot spares: the earliest joined replaces a lost node in the next round, at full size") {
  JobSettings settings = job(3, 3);
  settings.spares = 2;
  play(settings, {
      {"join 1", {}},
      {"join 2", {}},
      {"join 5", {"n1 assign round=1 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                  "n5 assign round=1 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
      // The order of joining, not the node's name, orders the spares.
      {"join 4", {"n4 spare 1: " + spare_why(1, "3", 1)}},
      {"join 3", {"n3 spare 2: " + spare_why(1, "3", 2)}},
      {"join 6", {"n6 finish exit=69 restarts=0 error=rendezvous 'job' already has its 3 nodes and 2 spares "
                  "(--rdzv_conf spares=2); stop this node or give every node a larger --rdzv_conf spares"}},
      {"gone 3", {}},  // a spare lost: the round goes on
      {"join 3", {"n3 spare 2: " + spare_why(1, "3", 2)}},
      {"@5 gone 2", {"n1 stop round=1 node_lost: node h2 (10.0.0.2) was lost: it closed the connection",
                     "n5 stop round=1 node_lost: node h2 (10.0.0.2) was lost: it closed the connection"}},
      {"@5 stopped 1 1", {}},
      // No last call and no join timeout: the round starts as the last node reports, with the
      // earliest-joined spare, at the same world size; the other spare moves up.
      {"@5 stopped 5 1", {"n1 assign round=2 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                          "n4 assign round=2 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                          "n5 assign round=2 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001",
                          "n3 spare 1: " + spare_why(2, "3", 1)}},
  });
}

TEST_CASE("workers that fail while a lost node's round stops: the loss ends the round, not a failure") {
  JobSettings settings = job(2, 2);
  settings.spares = 1;
  play(settings, {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"join 3", {"n3 spare 1: rendezvous 'job' runs round 1 with its 2 nodes (--nnodes=2); this node waits as spare 1 "
                  "and takes the place of a node that is lost"}},
      {"@5 gone 2", {"n1 stop round=1 node_lost: node h2 (10.0.0.2) was lost: it closed the connection"}},
      // n1's rank 0 raised in its SIGTERM handler (exit 1) and rank 1 saw its peer go: no restart
      // of --max_restarts=0 is needed, the spare takes n2's place.
      {"@5 fail 1 1 rank=0 exit=1", {}},
      {"@5 stopped 1 1 fail=1:1:5:consequence", {"n1 assign round=2 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                                                  "n3 assign round=2 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
  });
}

TEST_CASE("spares=0 refuses a node beyond MAX; by default any number wait") {
  JobSettings settings = job(1, 2);
  settings.spares = 0;
  play(settings, {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"join 3", {"n3 finish exit=69 restarts=0 error=rendezvous 'job' already has its 2 nodes and 0 spares "
                  "(--rdzv_conf spares=0); stop this node or give every node a larger --rdzv_conf spares"}},
  });
  Script any(job(1, 2));
  any.run("join 1");
  any.run("join 2");
  for (NodeId n = 3; n < 20; ++n) CHECK(any.run(fmt::format("join {}", n)).size() == 1);
}

TEST_CASE("quick joins and leaves are free up to max_membership_changes in a row, then cost restarts") {
  JobSettings settings = job(2, 3, 1);
  settings.max_membership_changes = 2;
  const std::string joined3 = "membership_change: node h3 (10.0.0.3) joined; admitting it in the next round";
  const std::string lost3 = "node_lost: node h3 (10.0.0.3) was lost: it closed the connection";
  // Both cases begin with two quick membership changes: h3 joins (ending round 1), then is lost
  // (ending round 2). Each SUBCASE runs the test case from its top, so on a script of its own.
  Script script(settings);
  play(script, {
      {"join 1", {}},
      {"join 2", {}},
      {"@30 tick", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@31 join 3", {"n1 stop round=1 " + joined3, "n2 stop round=1 " + joined3}},
      {"stopped 1 1", {}},
      {"stopped 2 1", {"n1 assign round=2 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                       "n2 assign round=2 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                       "n3 assign round=2 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
      {"@32 gone 3", {"n1 stop round=2 " + lost3, "n2 stop round=2 " + lost3}},
      {"stopped 1 2", {}},
      {"stopped 2 2", {"n1 assign round=3 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                       "n2 assign round=3 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
  });
  SUBCASE("churn spends the budget, then ends the job") {
    play(script, {
        {"@33 join 3", {"n1 stop round=3 " + joined3, "n2 stop round=3 " + joined3}},
        {"stopped 1 3", {}},
        {"stopped 2 3", {"n1 assign round=4 restarts=1 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                         "n2 assign round=4 restarts=1 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                         "n3 assign round=4 restarts=1 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
        {"@34 gone 3", {"n1 stop round=4 " + lost3, "n2 stop round=4 " + lost3}},
        {"stopped 1 4", {}},
        {"stopped 2 4",
         {"n1 finish exit=69 restarts=1 error=4 rounds in a row ended by nodes joining or leaving within 30 s of their "
          "start (last: node h3 (10.0.0.3) was lost: it closed the connection), more than max_membership_changes=2, "
          "and the 1 restarts of --max_restarts are spent; raise --rdzv_conf max_membership_changes or "
          "--max_restarts",
          "n2 finish exit=69 restarts=1 error=4 rounds in a row ended by nodes joining or leaving within 30 s of their "
          "start (last: node h3 (10.0.0.3) was lost: it closed the connection), more than max_membership_changes=2, "
          "and the 1 restarts of --max_restarts are spent; raise --rdzv_conf max_membership_changes or "
          "--max_restarts"}},
    });
  }
  SUBCASE("a round that ran for the last-call window is progress: the count starts again") {
    play(script, {
        {"@100 join 3", {"n1 stop round=3 " + joined3, "n2 stop round=3 " + joined3}},
        {"stopped 1 3", {}},
        {"stopped 2 3", {"n1 assign round=4 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                         "n2 assign round=4 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                         "n3 assign round=4 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
    });
  }
}

TEST_CASE("success needs every node (the exit barrier); a failure elsewhere first restarts all") {
  SUBCASE("barrier") {
    play(job(2, 2), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"succeeded 1 1", {}},
        {"join 3 nnodes=2:2", {"n3 spare 1: rendezvous 'job' runs round 1 with its 2 nodes (--nnodes=2); this node "
                               "waits as spare 1 and takes the place of a node that is lost"}},  // full
        {"succeeded 2 1", {"n1 finish exit=0 restarts=0", "n2 finish exit=0 restarts=0", "n3 finish exit=0 restarts=0"}},
    });
  }
  SUBCASE("failure after another node succeeded") {
    play(job(2, 2, 3), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"succeeded 1 1", {}},
        // n1 has no workers to stop, but may serve the round's store: it must report too.
        {"fail 2 1", {"n1 stop round=1 worker_failed: " + kFail2}},
        {"stopped 2 1", {}},
        {"stopped 1 1", {"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                         "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
    });
  }
  SUBCASE("success that crosses the stop: the node's report of the stop ends its part") {
    play(job(2, 2, 3), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"fail 2 1", {"n1 stop round=1 worker_failed: " + kFail2}},
        {"stopped 2 1", {}},
        {"succeeded 1 1", {}},
        {"stopped 1 1", {"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                         "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
    });
  }
  SUBCASE("a node lost after it succeeded does not stop the others") {
    play(job(2, 3), {
        {"join 1", {}},
        {"join 2", {}},
        {"join 3", {"n1 assign round=1 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                    "n3 assign round=1 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
        {"succeeded 3 1", {}},
        {"gone 3", {}},
        {"join 4", {"n4 spare 1: " + spare_why(1, "2:3", 1)}},  // the job is ending: not admitted
        {"succeeded 1 1", {}},
        {"succeeded 2 1", {"n1 finish exit=0 restarts=0", "n2 finish exit=0 restarts=0", "n4 finish exit=0 restarts=0"}},
    });
  }
}

TEST_CASE("a node that does not report its workers stopped within close_timeout ends the job") {
  Script s(job(2, 2));
  s.run("join 1");
  s.run("join 2");
  CHECK(s.run("@100 fail 1 1") == Lines{"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed with "
                                        "exit code 1"});
  CHECK(s.run("stopped 1 1") == Lines{});
  CHECK(s.coordinator().next_deadline() == 160.0);
  const std::string error =
      " restarts=0 error=node h2 (10.0.0.2) did not report its workers stopped within 60 s after round 1 ended (worker "
      "rank 10 (local rank 0) on h1 failed with exit code 1); raise --rdzv_conf close_timeout=SECONDS";
  CHECK(s.run("@160 tick") == Lines{"n1 finish exit=69" + error, "n2 finish exit=69" + error});
}

TEST_CASE("messages about a past round, or from nodes outside the round, change nothing") {
  play(job(1, 1, 2), {
      {"join 1", {"n1 assign round=1 restarts=0 group=0/1 ranks=0/2 master=10.0.0.1:1001"}},
      {"fail 1 1", {}},
      {"stopped 1 1", {"n1 assign round=2 restarts=1 group=0/1 ranks=0/2 master=10.0.0.1:1001"}},
      {"fail 1 1", {}},
      {"stopped 1 1", {}},
      {"succeeded 1 1", {}},
      {"succeeded 9 2", {}},
      {"gone 9", {}},
      {"succeeded 1 2", {"n1 finish exit=0 restarts=1"}},
  });
}


TEST_CASE("many nodes: each event is counted, not found by a walk; the round ends on the last report") {
  constexpr int kNodes = 2000;
  Script s(job(kNodes, kNodes, 1));
  for (int n = 1; n < kNodes; ++n) REQUIRE(s.run(fmt::format("join {} rank={}", n, n - 1)).empty());
  CHECK(s.run(fmt::format("join {} rank={}", kNodes, kNodes - 1)).size() == kNodes);
  // A failure stops every other node; the next round starts with the last report, not before.
  CHECK(s.run("fail 1 1").size() == kNodes - 1);
  for (int n = 1; n < kNodes; ++n) REQUIRE(s.run(fmt::format("stopped {} 1", n)).empty());
  const Lines next = s.run(fmt::format("stopped {} 1", kNodes));
  REQUIRE(next.size() == kNodes);
  CHECK(next.front() == "n1 assign round=2 restarts=1 group=0/2000 ranks=0/4000 master=10.0.0.1:1001");
  // Success only when the last node succeeded.
  for (int n = 1; n < kNodes; ++n) REQUIRE(s.run(fmt::format("succeeded {} 2", n)).empty());
  CHECK(s.run(fmt::format("succeeded {} 2", kNodes)).size() == kNodes);
}

}  // namespace
}  // namespace ddprun::elastic
