#include "core/rendezvous_protocol.hpp"

#include <doctest/doctest.h>

namespace ddprun::elastic {
namespace {

TEST_CASE("every message survives the wire") {
  WorkerFailure f;
  f.rank = 5;
  f.local_rank = 1;
  f.group_rank = 2;
  f.host = "h2";
  f.pid = 4242;
  f.exit_code = 137;
  f.signal = 9;
  f.signal_from_outside = true;
  f.message = "out of memory";
  f.traceback = "Traceback (most recent call last):\n  File \"t.py\", line 3";
  f.error_file = "/tmp/e.json";
  f.timestamp = 1700000000.25;
  const WorkerFailure f2 = nlohmann::json::parse(nlohmann::json(f).dump()).get<WorkerFailure>();
  CHECK(f2.rank == 5);
  CHECK(f2.local_rank == 1);
  CHECK(f2.group_rank == 2);
  CHECK(f2.host == "h2");
  CHECK(f2.pid == 4242);
  CHECK(f2.exit_code == 137);
  CHECK(f2.signal == 9);
  CHECK(f2.signal_from_outside);
  CHECK(f2.message == "out of memory");
  CHECK(f2.traceback == f.traceback);
  CHECK(f2.error_file == "/tmp/e.json");
  CHECK(f2.timestamp == 1700000000.25);

  RoundAssignment a{3, 1, 2, 4, 8, 16, "10.0.0.1", 4567, "job", true};
  const RoundAssignment a2 = nlohmann::json(a).get<RoundAssignment>();
  CHECK(nlohmann::json(a2) == nlohmann::json(a));
  CHECK(nlohmann::json(a) == nlohmann::json::parse(R"({"round":3,"restart_count":1,"group_rank":2,
      "group_world_size":4,"base_rank":8,"world_size":16,"master_addr":"10.0.0.1","master_port":4567,
      "run_id":"job","agent_store":true})"));

  JobOutcome o;
  o.exit_code = 137;
  o.failures = {f, f};
  o.error = "";
  o.restarts = 2;
  const JobOutcome o2 = nlohmann::json(o).get<JobOutcome>();
  CHECK(nlohmann::json(o2) == nlohmann::json(o));

  NodeSpec s;
  s.run_id = "job";
  s.min_nodes = 2;
  s.max_nodes = 3;
  s.max_restarts = 1;
  s.node_rank = 1;
  s.nproc = 4;
  s.addr = "127.0.0.2";
  s.hostname = "vm";
  s.master_port = 4000;
  s.hosts_rendezvous = true;
  s.agent_store = true;
  CHECK(nlohmann::json(nlohmann::json(s).get<NodeSpec>()) == nlohmann::json(s));
}

TEST_CASE("server messages") {
  CHECK(to_wire(Stop{1, 4, StopReason::kNodeLost, "gone"}) ==
        nlohmann::json::parse(R"({"type":"stop","round":4,"reason":"node_lost","why":"gone"})"));
  CHECK(to_wire(Assign{1, RoundAssignment{}})["type"] == "assign");
  CHECK(to_wire(Spare{1, 2, "full"}) == nlohmann::json::parse(R"({"type":"spare","place":2,"why":"full"})"));
  CHECK(to_wire(Finish{1, JobOutcome{}}) ==
        nlohmann::json::parse(R"({"type":"finish","outcome":{"exit_code":0,"failures":[],"error":"","restarts":0}})"));
  for (StopReason r : {StopReason::kWorkerFailed, StopReason::kNodeLost, StopReason::kMembershipChange,
                       StopReason::kShutdown}) {
    CHECK(parse_stop_reason(to_string(r)) == r);
  }
  CHECK_THROWS_AS(parse_stop_reason("bored"), std::invalid_argument);
}

TEST_CASE("a message missing a field is an error, not a default") {
  nlohmann::json j = RoundAssignment{};
  j.erase("master_port");
  CHECK_THROWS_AS(j.get<RoundAssignment>(), nlohmann::json::exception);
}

}  // namespace
TEST_CASE("parse_message takes objects with a string type, nested a few levels") {
  CHECK(parse_message(R"({"type":"heartbeat"})"));
  CHECK(parse_message(R"({"type":"finish","outcome":{"failures":[{"rank":1}]}})"));
  CHECK_FALSE(parse_message(""));
  CHECK_FALSE(parse_message("[1]"));
  CHECK_FALSE(parse_message(R"({"type":3})"));
  CHECK_FALSE(parse_message(R"({"kind":"join"})"));
  CHECK_FALSE(parse_message(R"({"type":"join")"));
  // 1 MiB of '[' (a line the channel accepts) used to build a tree whose destruction overflowed
  // the stack.
  const std::string deep = R"({"type":"join","node":)" + std::string(1 << 20, '[');
  CHECK_FALSE(parse_message(deep));
  CHECK_FALSE(parse_message(std::string(1 << 20, '{')));
  // get<int>() of 1e300 is undefined behaviour (found by fuzz_rendezvous_protocol).
  CHECK_FALSE(parse_message(R"({"type":"stop","round":1e300})"));
  CHECK_FALSE(parse_message(R"({"type":"finish","outcome":{"failures":[{"pid":-3e9}]}})"));
  CHECK_FALSE(parse_message(R"({"type":"stop","round":1e400})"));  // overflows a double: no throw either
  CHECK(parse_message(R"({"type":"stop","round":2.0})"));
  CHECK(parse_message(R"({"type":"worker_failed","failure":{"timestamp":4e9}})"));
}

}  // namespace ddprun::elastic
