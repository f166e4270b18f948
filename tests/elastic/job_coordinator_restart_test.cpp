// JobCoordinator's restart policy and suspect nodes as tables: what a restart cannot fix, the
// crash loop's backoff, consequences never the root cause, and quarantine (quarantine.hpp).
#include "job_coordinator_script.hpp"

namespace ddprun::elastic {
namespace {

TEST_CASE("the restart policy decides once, for every node: not restarting what a restart cannot fix") {
  JobSettings settings = job(2, 2, 100);
  settings.restart = RestartSettings{};
  play(settings, {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@1 fail 2 1 kind=syntax_error noretry", {"n1 stop round=1 worker_failed: " + kFail2}},
      {"stopped 1 1", {}},
      {"stopped 2 1",
       {"n1 finish exit=1 restarts=0 failure=h2:20:1:syntax_error stop=not restarting: rank 20 on h2: syntax_error: "
        "running the same code again cannot fix a syntax_error; --restart_on=any restarts it anyway hopeless",
        "n2 finish exit=1 restarts=0 failure=h2:20:1:syntax_error stop=not restarting: rank 20 on h2: syntax_error: "
        "running the same code again cannot fix a syntax_error; --restart_on=any restarts it anyway hopeless"}},
  });
}

TEST_CASE("a crash loop's backoff: the next round waits, then starts on a tick") {
  JobSettings settings = job(2, 2, 100);
  settings.restart = RestartSettings{};
  settings.restart.crash_loop_limit = 2;
  Script script(settings);
  for (const char* join : {"join 1", "join 2"}) script.run(join);
  CHECK(script.run("@10 fail 1 1 kind=exit_code") == Lines{"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed with exit code 1"});
  script.run("stopped 1 1");
  CHECK(script.run("stopped 2 1").empty());  // waits 1 s
  CHECK(script.coordinator().next_deadline() == 11.0);
  CHECK(script.coordinator().restart_at() == 11.0);
  CHECK(script.run("@10.5 tick").empty());
  CHECK(script.run("@11 tick") == Lines{"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001 backoff=1",
                                        "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001 backoff=1"});
  CHECK_FALSE(script.coordinator().restart_at());
  script.run("@12 fail 2 2 kind=exit_code");
  script.run("stopped 1 2");
  CHECK(script.run("stopped 2 2") ==
        Lines{"n1 finish exit=1 restarts=1 failure=h2:20:1:exit_code stop=crash loop: 2 failures in a row with no "
              "progress since their start (last: rank 20 on h2: exit_code); fix the cause, or raise --crash_loop_limit "
              "(0: never stop) hopeless",
              "n2 finish exit=1 restarts=1 failure=h2:20:1:exit_code stop=crash loop: 2 failures in a row with no "
              "progress since their start (last: rank 20 on h2: exit_code); fix the cause, or raise --crash_loop_limit "
              "(0: never stop) hopeless"});
}

TEST_CASE("a consequence is never the root cause, even when it came first") {
  play(job(2, 2), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 1 1 exit=2 at=10.1 kind=consequence",
       {"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed with exit code 2"}},
      {"stopped 1 1", {}},
      {"stopped 2 1 fail=21:6:10.5 fail=20:1:10.2:consequence",
       {"n1 finish exit=6 restarts=0 failure=h2:21:6 failure=h1:10:2:consequence failure=h2:20:1:consequence",
        "n2 finish exit=6 restarts=0 failure=h2:21:6 failure=h1:10:2:consequence failure=h2:20:1:consequence"}},
  });
}


// Suspect nodes (quarantine.hpp): the root cause of a restarted round counts against its node.
const std::string kQuarantine2 =
    "its workers were the root cause of 2 hardware-like failures within 600 s (segfault, segfault)";

TEST_CASE("quarantine: a node whose worker segfaults twice within the window is left out; the spare takes its place") {
  JobSettings settings = job(3, 3, 5);
  Script script(settings);
  const auto run = [&](const std::string& command) { return script.run(command); };
  CHECK(run("join 1 host").empty());
  CHECK(run("join 2").empty());
  CHECK(run("join 3").size() == 3);
  CHECK(run("join 4") == Lines{"n4 spare 1: " + spare_why(1, "3", 1)});
  CHECK(script.coordinator().membership().spares == std::vector<std::string>{"h4 (10.0.0.4)"});
  // Round 1: n2's worker segfaults; a normal restart, n2 is counted once.
  CHECK(run("@100 fail 2 1 exit=139 kind=segfault").size() == 2);
  CHECK(run("@100 stopped 2 1").empty());
  CHECK(run("@100 stopped 1 1").empty());
  Lines round2 = run("@100 stopped 3 1");
  REQUIRE(round2.size() == 4);
  CHECK(round2[1] == "n2 assign round=2 restarts=1 group=1/3 ranks=2/6 master=10.0.0.1:1001");
  // Round 2: again within the window: n2 gets its own finish (exit 71) and round 3 runs with
  // the spare at full size.
  CHECK(run("@200 fail 2 2 exit=139 kind=segfault").size() == 2);
  CHECK(run("@200 stopped 2 2").empty());
  CHECK(run("@200 stopped 1 2").empty());
  const Lines round3 = run("@200 stopped 3 2");
  CHECK(round3 == Lines{"n2 finish exit=71 restarts=2 failure=h2:20:139:segfault error=this node (h2 (10.0.0.2)) is "
                        "quarantined: " + kQuarantine2 + "; the job goes on without it hopeless",
                        "n1 assign round=3 restarts=2 group=0/3 ranks=0/6 master=10.0.0.1:1001 quarantined=h2 (10.0.0.2)",
                        "n3 assign round=3 restarts=2 group=1/3 ranks=2/6 master=10.0.0.1:1001 quarantined=h2 (10.0.0.2)",
                        "n4 assign round=3 restarts=2 group=2/3 ranks=4/6 master=10.0.0.1:1001 quarantined=h2 (10.0.0.2)"});
  const JobMembership m = script.coordinator().membership();
  CHECK(m.spares.empty());
  REQUIRE(m.quarantined.size() == 1);
  CHECK(m.quarantined[0].node == "h2 (10.0.0.2)");
  CHECK(m.quarantined[0].why == kQuarantine2);
  CHECK(script.coordinator().history().suspects.count(2) == 0);
  // Its connection closing afterwards changes nothing.
  CHECK(run("@201 gone 2").empty());
  // The job's end names it on every node.
  CHECK(run("@300 succeeded 1 3").empty());
  CHECK(run("@300 succeeded 3 3").empty());
  CHECK(run("@300 succeeded 4 3") == Lines{"n1 finish exit=0 restarts=2", "n3 finish exit=0 restarts=2",
                                           "n4 finish exit=0 restarts=2"});
}

// Runs rounds in which `victim`'s worker fails with `kind` at each of `times`; returns the
// messages of the last round's end.
Lines fail_rounds(Script& script, int nodes, int victim, const std::string& kind, const std::vector<int>& times) {
  Lines last;
  int round = 1;
  for (int t : times) {
    script.run(fmt::format("@{} fail {} {} exit=139 kind={}", t, victim, round, kind));
    for (int n = 1; n <= nodes; ++n) last = script.run(fmt::format("@{} stopped {} {}", t, n, round));
    ++round;
  }
  return last;
}

// Nodes 1 (the host) to `nodes` joined, their first round assigned.
void join_all(Script& script, int nodes) {
  script.run("join 1 host");
  for (int n = 2; n <= nodes; ++n) script.run(fmt::format("join {}", n));
}

TEST_CASE("quarantine: not at MIN without a spare, not the host, not outside the window, not a program's own failure") {
  struct Row {
    const char* what;
    int min_nodes;
    int quarantine_after;
    int nodes;  // joined; beyond 3, spares
    int victim;
    const char* kind;
    std::vector<int> times;
  };
  const std::vector<Row> rows = {
      {"at MIN without a spare: a normal restart", 3, 2, 3, 2, "segfault", {100, 200}},
      {"the node that hosts the rendezvous stays", 3, 2, 4, 1, "segfault", {100, 200}},
      {"the failures further apart than the window", 3, 2, 4, 2, "segfault", {100, 800}},
      {"a Python exception is the program's, not the node's", 3, 2, 4, 2, "python_exception", {100, 200}},
      {"quarantine_after=0 turns it off", 3, 0, 4, 2, "segfault", {100, 200}},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    JobSettings settings = job(row.min_nodes, 3, 5);
    settings.quarantine.after = row.quarantine_after;
    Script script(settings);
    join_all(script, row.nodes);
    const Lines last = fail_rounds(script, 3, row.victim, row.kind, row.times);
    CHECK(script.coordinator().membership().quarantined.empty());
    REQUIRE(last.size() == static_cast<std::size_t>(row.nodes));  // the next round's assigns and the spare's word
    for (int n = 0; n < 3; ++n) CHECK(last[n].find(fmt::format("round={}", row.times.size() + 1)) != std::string::npos);
  }
  // At MIN, the restart's reason says the node is suspect and why it is kept.
  Script at_min(job(3, 3, 5));
  join_all(at_min, 3);
  fail_rounds(at_min, 3, 2, "segfault", {100, 200});
  REQUIRE(!at_min.last().empty());
  const auto* assign = std::get_if<Assign>(&at_min.last().front());
  REQUIRE(assign != nullptr);
  CHECK(describe_restart(assign->assignment.restart_reason)
            .find("; node h2 (10.0.0.2) is suspect: " + kQuarantine2 +
                  "; kept, since the job would have 2 nodes without it, fewer than --nnodes MIN 3, and no spare") !=
        std::string::npos);
}

TEST_CASE("quarantine: an elastic job shrinks to MIN without the node") {
  Script script(job(2, 3, 5));
  join_all(script, 3);
  const Lines last = fail_rounds(script, 3, 3, "nccl_error", {100, 200});
  REQUIRE(last.size() == 3);
  CHECK(last[0].rfind("n3 finish exit=71", 0) == 0);
  CHECK(last[1].find("group=0/2") != std::string::npos);
}

TEST_CASE("quarantine: a new coordinator goes on from the history of the last (the etcd leader's state)") {
  JobSettings settings = job(3, 3, 5);
  Script first(settings);
  join_all(first, 4);
  fail_rounds(first, 3, 2, "segfault", {100});
  JobHistory history = first.coordinator().history();
  REQUIRE(history.suspects.count(2) == 1);
  REQUIRE(history.restart);
  CHECK(history.restart->restarts.size() == 1);

  // The next coordinator (a new leader) with the same node ids: one more failure quarantines n2.
  settings.rounds_before = 1;
  settings.restarts_used = 1;
  settings.history = history;
  Script second(settings);
  join_all(second, 4);
  second.run("@200 fail 2 2 exit=139 kind=segfault");
  Lines last;
  for (int n = 1; n <= 3; ++n) last = second.run(fmt::format("@200 stopped {} 2", n));
  REQUIRE(!last.empty());
  CHECK(last[0].rfind("n2 finish exit=71 restarts=2", 0) == 0);
}

}  // namespace
}  // namespace ddprun::elastic
