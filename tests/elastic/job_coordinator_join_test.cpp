// JobCoordinator's joins as tables: the nodes that do not fit the job refused with the flag to
// fix (join_refusal.hpp's checks, through join() and the lookups the coordinator makes), a
// --node_rank freed and taken again, who hosts the rendezvous, and a coordinator that goes on
// from an earlier one's rounds.
#include "job_coordinator_script.hpp"

namespace ddprun::elastic {
namespace {

TEST_CASE("nodes that do not fit the job are refused with the flag to fix") {
  struct Case {
    std::string join;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"join 2 run=other", "this rendezvous endpoint serves run 'job', not 'other'; give every node the same --rdzv_id"},
      {"join 2 nnodes=2:4", "this node has --nnodes=2:4 but rendezvous 'job' has --nnodes=3; give every node the same "
                            "--nnodes"},
      {"join 2 max_restarts=5", "this node has --max_restarts=5 but rendezvous 'job' has --max_restarts=0; give every "
                                "node the same --max_restarts"},
      {"join 2 crash_loop_limit=3", "this node has --restart_on=retryable --restart_window=0 --restart_backoff_max=0 "
                                    "--crash_loop_limit=3 but rendezvous 'job' has --restart_on=retryable "
                                    "--restart_window=0 --restart_backoff_max=0 --crash_loop_limit=0; give every node "
                                    "the same restart options"},
      {"join 2 heartbeat_timeout=1.5", "this node has --rdzv_conf heartbeat_interval=0.5,heartbeat_timeout=1.5 but "
                                       "rendezvous 'job' has heartbeat_interval=0.5,heartbeat_timeout=5; give every "
                                       "node the same heartbeat settings"},
      {"join 2 rank=3", "--node_rank=3 is out of range for --nnodes=3 (0 to 2)"},
      {"join 2 rank=1", "--node_rank=1 is already taken by node h1 (10.0.0.1) in rendezvous 'job'; give each node its "
                        "own --node_rank"},
      {"join 2 nproc=0", "--nproc_per_node=0 is out of range (1 to 1048576)"},
      {"join 1", "this node joined twice"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.join);
    Script s(job(3, 3));
    s.run("join 1 rank=1");
    CHECK(s.run(c.join) == Lines{"n" + c.join.substr(5, 1) + " finish exit=69 restarts=0 error=" + c.error});
    // The refused node is not part of the job: two more still start it.
    CHECK(s.run("join 7").empty());
    CHECK(s.run("join 8").size() == 3);
  }
}

TEST_CASE("a --node_rank is free again once its node is gone, and taken again by the next to join") {
  play(job(2, 2), {
      {"join 1 rank=1", {}},
      {"gone 1", {}},
      {"join 2 rank=1", {}},
      {"join 3 rank=1", {"n3 finish exit=69 restarts=0 error=--node_rank=1 is already taken by node h2 (10.0.0.2) in "
                         "rendezvous 'job'; give each node its own --node_rank"}},
      {"join 4 rank=0", {"n4 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.4:1004",
                         "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.4:1004"}},
  });
}


TEST_CASE("only the transport says which node hosts the rendezvous; a peer's claim is refused") {
  const std::string kClaim =
      "error=this node says it hosts the rendezvous, but the rendezvous runs in the launcher of ";
  const std::string kTail = "; a node hosts it only in its own process (give one node alone --rdzv_conf is_host=1, "
                            "or the endpoint's address)";
  struct Case {
    std::string name;
    std::vector<Step> steps;
  };
  const std::vector<Case> cases = {
      {"the host's own node is rank 0 though its hostname sorts last",
       {{"join 9 host", {}},
        {"join 1", {"n9 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.9:1009",
                    "n1 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.9:1009"}}}},
      {"a stranger claiming to host before the host joined: refused, then the job starts",
       {{"join 1 claims_host", {"n1 finish exit=69 restarts=0 " + kClaim + "another node" + kTail}},
        {"join 9 host", {}},
        {"join 2", {"n9 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.9:1009",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.9:1009"}}}},
      {"an insider claiming to host after the host joined: refused, named, and the job goes on",
       {{"join 9 host", {}},
        {"join 1 claims_host", {"n1 finish exit=69 restarts=0 " + kClaim + "h9 (10.0.0.9)" + kTail}},
        {"join 2", {"n9 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.9:1009",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.9:1009"}}}},
      {"a claim with node_rank 0 is refused too: rank 0 is not taken",
       {{"join 9 host rank=1", {}},
        {"join 1 claims_host rank=0", {"n1 finish exit=69 restarts=0 " + kClaim + "h9 (10.0.0.9)" + kTail}},
        {"join 2 rank=0", {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002",
                           "n9 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002"}}}},
      {"a second connection of the host is refused",
       {{"join 9 host", {}},
        {"join 8 host",
         {"n8 finish exit=69 restarts=0 error=the rendezvous host joined a second time, while h9 (10.0.0.9) is its "
          "first connection"}}}},
      {"once the host is gone, it may join again",
       {{"join 9 host", {}}, {"gone 9", {}}, {"join 8 host", {}},
        {"join 2", {"n8 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.8:1008",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.8:1008"}}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    play(job(2, 2), c.steps);
  }
}

TEST_CASE("a peer's fields out of range are refused, one line each, and the job goes on") {
  struct Case {
    std::string join;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"join 1 rank=-2", "--node_rank=-2 is out of range for --nnodes=2 (0 to 1)"},
      {"join 1 rank=2", "--node_rank=2 is out of range for --nnodes=2 (0 to 1)"},
      {"join 1 nproc=0", "--nproc_per_node=0 is out of range (1 to 1048576)"},
      {"join 1 nproc=1048577", "--nproc_per_node=1048577 is out of range (1 to 1048576)"},
      {"join 1 port=0", "this node's MASTER_PORT 0 is not a TCP port (1 to 65535)"},
      {"join 1 port=65536", "this node's MASTER_PORT 65536 is not a TCP port (1 to 65535)"},
      {"join 1 addr=10.0.0.1;reboot", "this node's address '10.0.0.1;reboot' is not a host name or IP address"},
      {"join 1 addr=", "this node's address '' is not a host name or IP address"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.join);
    play(job(2, 2), {{c.join, {"n1 finish exit=69 restarts=0 error=" + c.error}},
                     {"join 2 addr=fe80::1%eth0", {}},
                     {"join 3 addr=node-3.example",
                      {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=fe80::1%eth0:1002",
                       "n3 assign round=1 restarts=0 group=1/2 ranks=2/4 master=fe80::1%eth0:1002"}}});
  }
}

TEST_CASE("the world size never overflows: a node that would make it more than 2^31-1 workers is refused") {
  Script script(job(4096, 4096));
  for (int n = 1; n <= 2047; ++n) REQUIRE(script.run(fmt::format("join {} nproc=1048576", n)).empty());
  CHECK(script.run("join 2048 nproc=1048576") ==
        Lines{"n2048 finish exit=69 restarts=0 error=--nproc_per_node=1048576 would make the job more than "
              "2147483647 workers, with the 2146435072 of the nodes joined"});
  CHECK(script.run("join 2049 nproc=1048575").empty());
}

TEST_CASE("a coordinator elected after another goes on with its rounds and its restart budget") {
  JobSettings settings = job(2, 2, 2);
  settings.rounds_before = 4;  // the etcd rendezvous's next leader, from the job's state key
  settings.restarts_used = 2;
  play(settings, {
      {"join 1", {}},
      {"join 2", {"n1 assign round=5 restarts=2 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=5 restarts=2 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      // The budget is spent: this failure ends the job instead of restarting it.
      {"fail 2 5", {"n1 stop round=5 worker_failed: " + kFail2}},
      {"stopped 1 5", {}},
      {"stopped 2 5", {"n1 finish exit=1 restarts=2 failure=h2:20:1 stop=" + kSpent2,
                       "n2 finish exit=1 restarts=2 failure=h2:20:1 stop=" + kSpent2}},
  });
}

}  // namespace
}  // namespace ddprun::elastic
