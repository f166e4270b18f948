// join_refusal() as a table: each check once, with the words it says, and which check wins when
// several fail. The coordinator's own tables (job_coordinator_join_test.cpp) check the same words
// through join(), with the lookups JobCoordinator makes.
#include "core/join_refusal.hpp"

#include <doctest/doctest.h>

#include <functional>

#include "ddprun/input_limits.hpp"

namespace ddprun::elastic {
namespace {

JobSettings settings() {
  JobSettings s;
  s.run_id = "job";
  s.min_nodes = 2;
  s.max_nodes = 3;
  s.spares = 1;
  return s;
}

// A spec that fits settings(), from a peer.
NodeSpec fitting() {
  NodeSpec spec;
  spec.run_id = "job";
  spec.min_nodes = 2;
  spec.max_nodes = 3;
  spec.addr = "10.0.0.2";
  spec.hostname = "h2";
  spec.master_port = 29500;
  return spec;
}

TEST_CASE("join refusal") {
  struct Case {
    std::string name;
    std::function<void(NodeSpec&, JoinContext&)> change;
    std::optional<std::string> refusal;
    Joiner joiner = Joiner::kPeer;
  };
  const std::string long_name(kMaxHostChars + 1, 'h');
  const std::vector<Case> cases = {
      {"a node that fits", [](NodeSpec&, JoinContext&) {}, std::nullopt},
      {"the host, as the transport says", [](NodeSpec& s, JoinContext&) { s.hosts_rendezvous = true; }, std::nullopt,
       Joiner::kHost},
      {"finished, before every other check",
       [](NodeSpec& s, JoinContext& j) {
         j.finished = true;
         s.run_id = "other";
       },
       "rendezvous 'job' has already finished; start a new job with another --rdzv_id"},
      {"a peer that says it hosts, before the host joined",
       [](NodeSpec& s, JoinContext&) { s.hosts_rendezvous = true; },
       "this node says it hosts the rendezvous, but the rendezvous runs in the launcher of another node; a node hosts "
       "it only in its own process (give one node alone --rdzv_conf is_host=1, or the endpoint's address)"},
      {"a peer that says it hosts, named after the host",
       [](NodeSpec& s, JoinContext& j) {
         s.hosts_rendezvous = true;
         j.host = "h0 (10.0.0.0)";
       },
       "this node says it hosts the rendezvous, but the rendezvous runs in the launcher of h0 (10.0.0.0); a node hosts "
       "it only in its own process (give one node alone --rdzv_conf is_host=1, or the endpoint's address)"},
      {"a second host", [](NodeSpec&, JoinContext& j) { j.host = "h0 (10.0.0.0)"; },
       "the rendezvous host joined a second time, while h0 (10.0.0.0) is its first connection", Joiner::kHost},
      {"the host joining again on its own connection goes on to the next checks",
       [](NodeSpec&, JoinContext& j) {
         j.host = "h0 (10.0.0.0)";
         j.host_is_joiner = true;
         j.joined = true;
       },
       "this node joined twice", Joiner::kHost},
      {"another run", [](NodeSpec& s, JoinContext&) { s.run_id = "other"; },
       "this rendezvous endpoint serves run 'job', not 'other'; give every node the same --rdzv_id"},
      {"another --nnodes", [](NodeSpec& s, JoinContext&) { s.max_nodes = 2; },
       "this node has --nnodes=2 but rendezvous 'job' has --nnodes=2:3; give every node the same --nnodes"},
      {"another --max_restarts", [](NodeSpec& s, JoinContext&) { s.max_restarts = 5; },
       "this node has --max_restarts=5 but rendezvous 'job' has --max_restarts=0; give every node the same "
       "--max_restarts"},
      {"other restart options", [](NodeSpec& s, JoinContext&) { s.restart.restart_on_any = true; },
       "this node has --restart_on=any --restart_window=0 --restart_backoff_max=60 --crash_loop_limit=5 but "
       "rendezvous 'job' has --restart_on=retryable --restart_window=0 --restart_backoff_max=60 --crash_loop_limit=5; "
       "give every node the same restart options"},
      {"other heartbeats", [](NodeSpec& s, JoinContext&) { s.heartbeat_interval = 1; },
       "this node has --rdzv_conf heartbeat_interval=1,heartbeat_timeout=5 but rendezvous 'job' has "
       "heartbeat_interval=0.5,heartbeat_timeout=5; give every node the same heartbeat settings"},
      {"heartbeats that differ in the seventh digit, named so",
       [](NodeSpec& s, JoinContext&) { s.heartbeat_timeout = 5.0000001; },
       "this node has --rdzv_conf heartbeat_interval=0.5,heartbeat_timeout=5.0000001 but rendezvous 'job' has "
       "heartbeat_interval=0.5,heartbeat_timeout=5; give every node the same heartbeat settings"},
      {"a node that asks for no rehearsal of failures in a job that does",
       [](NodeSpec&, JoinContext&) {}, std::nullopt},
      {"--chaos on this node only", [](NodeSpec& s, JoinContext&) { s.chaos = "mtbf=5,kinds=kill,seed=1"; },
       "--chaos differs: node h2 (10.0.0.2) has --chaos=mtbf=5,kinds=kill,seed=1 but rendezvous 'job' has "
       "--chaos=off; a rehearsal of failures runs only when every node asks for it with the same spec: give every "
       "node the same --chaos (or none)"},
      {"another --chaos seed",
       [](NodeSpec& s, JoinContext&) { s.chaos = "mtbf=5,kinds=kill,seed=2"; },
       "--chaos differs: node h2 (10.0.0.2) has --chaos=mtbf=5,kinds=kill,seed=2 but rendezvous 'job' has "
       "--chaos=off; a rehearsal of failures runs only when every node asks for it with the same spec: give every "
       "node the same --chaos (or none)"},
      {"a setting before a field out of range",
       [](NodeSpec& s, JoinContext&) {
         s.max_restarts = 1;
         s.nproc = 0;
       },
       "this node has --max_restarts=1 but rendezvous 'job' has --max_restarts=0; give every node the same "
       "--max_restarts"},
      {"a node_rank out of range", [](NodeSpec& s, JoinContext&) { s.node_rank = 3; },
       "--node_rank=3 is out of range for --nnodes=2:3 (0 to 2)"},
      {"a node_rank below -1", [](NodeSpec& s, JoinContext&) { s.node_rank = -2; },
       "--node_rank=-2 is out of range for --nnodes=2:3 (0 to 2)"},
      {"no workers", [](NodeSpec& s, JoinContext&) { s.nproc = 0; },
       "--nproc_per_node=0 is out of range (1 to 1048576)"},
      {"a world size past 2^31-1",
       [](NodeSpec& s, JoinContext& j) {
         s.nproc = 2;
         j.workers = 2147483646;
       },
       "--nproc_per_node=2 would make the job more than 2147483647 workers, with the 2147483646 of the nodes joined"},
      {"a world size of exactly 2^31-1", [](NodeSpec&, JoinContext& j) { j.workers = 2147483646; }, std::nullopt},
      {"no TCP port", [](NodeSpec& s, JoinContext&) { s.master_port = 65536; },
       "this node's MASTER_PORT 65536 is not a TCP port (1 to 65535)"},
      {"a snapshot replicator's port that is no TCP port", [](NodeSpec& s, JoinContext&) { s.snapshot_port = 70000; },
       "this node's snapshot replication port 70000 is not a TCP port (0 to 65535)"},
      {"a snapshot replicator's id ddprun never makes",
       [](NodeSpec& s, JoinContext&) { s.snapshot_node = "../x"; },
       "this node's snapshot replicator id '../x' is not one ddprun makes"},
      {"a snapshot replicator", [](NodeSpec& s, JoinContext&) {
         s.snapshot_node = "0123456789abcdef-01234567";
         s.snapshot_port = 41000;
       }, std::nullopt},
      {"a peer's address that is no host", [](NodeSpec& s, JoinContext&) { s.addr = "a b"; },
       "this node's address 'a b' is not a host name or IP address"},
      {"the host's address is its command line's", [](NodeSpec& s, JoinContext&) { s.addr = "a b"; }, std::nullopt,
       Joiner::kHost},
      {"a bracketed IPv6 address with a zone", [](NodeSpec& s, JoinContext&) { s.addr = "[fe80::1%eth0]"; },
       std::nullopt},
      {"a peer's host name too long", [&](NodeSpec& s, JoinContext&) { s.hostname = long_name; },
       "this node's host name '" + shown(long_name) + "' has more than " + std::to_string(kMaxHostChars) +
           " characters"},
      {"joined twice", [](NodeSpec&, JoinContext& j) { j.joined = true; }, "this node joined twice"},
      {"the nodes and spares full", [](NodeSpec&, JoinContext& j) { j.nodes = 4; },
       "rendezvous 'job' already has its 3 nodes and 1 spare (--rdzv_conf spares=1); stop this node or give every "
       "node a larger --rdzv_conf spares"},
      {"room for the last spare", [](NodeSpec&, JoinContext& j) { j.nodes = 3; }, std::nullopt},
      {"a node_rank taken",
       [](NodeSpec& s, JoinContext& j) {
         s.node_rank = 1;
         j.rank_taken_by = "node h1 (10.0.0.1)";
       },
       "--node_rank=1 is already taken by node h1 (10.0.0.1) in rendezvous 'job'; give each node its own --node_rank"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    NodeSpec spec = fitting();
    JoinContext job;
    c.change(spec, job);
    CHECK(join_refusal(settings(), spec, c.joiner, job).value_or("(none)") == c.refusal.value_or("(none)"));
  }
}

TEST_CASE("--nnodes as a user writes it") {
  CHECK(nnodes(2, 2) == "2");
  CHECK(nnodes(1, 4) == "1:4");
}

}  // namespace
}  // namespace ddprun::elastic
