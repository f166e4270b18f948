#include "core/rendezvous_protocol.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "ddprun/input_limits.hpp"

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
  f.kind = FailureKind::kHostOom;
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
  a.snapshot_peers = {{"0123456789abcdef", "10.0.0.1", 40001}, {"fedcba9876543210", "10.0.0.2", 40002}};
  const RoundAssignment a2 = nlohmann::json(a).get<RoundAssignment>();
  CHECK(nlohmann::json(a2) == nlohmann::json(a));
  CHECK(a2.snapshot_peers == a.snapshot_peers);
  CHECK(nlohmann::json(a) == nlohmann::json::parse(R"({"round":3,"restart_count":1,"group_rank":2,
      "group_world_size":4,"base_rank":8,"world_size":16,"master_addr":"10.0.0.1","master_port":4567,
      "run_id":"job","agent_store":true,"restart_reason":{"restart":0,"max_restarts":0,"window":0.0,"after":"",
      "no_progress":0,"crash_loop_limit":0,"waited":0.0,"nodes":[]},"backoff":0.0,"quarantined":[],
      "snapshot_peers":[{"node":"0123456789abcdef","addr":"10.0.0.1","port":40001},
                        {"node":"fedcba9876543210","addr":"10.0.0.2","port":40002}]})"));

  JobOutcome o;
  o.exit_code = 137;
  o.failures = {f, f};
  o.error = "";
  o.restarts = 2;
  o.quarantined = {{"h3 (10.0.0.3)", "2 segfaults"}};
  const JobOutcome o2 = nlohmann::json(o).get<JobOutcome>();
  CHECK(nlohmann::json(o2) == nlohmann::json(o));
  REQUIRE(o2.quarantined.size() == 1);
  CHECK(o2.quarantined[0].node == "h3 (10.0.0.3)");
  CHECK(o2.quarantined[0].why == "2 segfaults");
  a.quarantined = o.quarantined;
  CHECK(nlohmann::json(nlohmann::json(a).get<RoundAssignment>()) == nlohmann::json(a));

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
        nlohmann::json::parse(R"({"type":"finish","outcome":{"exit_code":0,"failures":[],"error":"","restarts":0,
            "stop_reason":"","retryable":false,"quarantined":[]}})"));
  // A refusal by a host of version 5, before stop_reason and retryable, still reads.
  const JobOutcome old = nlohmann::json::parse(R"({"exit_code":69,"failures":[],"error":"other version","restarts":0})")
                             .get<JobOutcome>();
  CHECK(old.error == "other version");
  CHECK(old.stop_reason.empty());
  for (StopReason r : {StopReason::kWorkerFailed, StopReason::kNodeLost, StopReason::kMembershipChange,
                       StopReason::kShutdown}) {
    CHECK(parse_stop_reason(to_string(r)) == r);
  }
  CHECK_THROWS_AS(parse_stop_reason("bored"), std::invalid_argument);
}

// The host serialises a round's broadcasts once (BroadcastLines): each line must be the one the
// JSON of that node's message gives, whatever the round's strings hold, and a change of any field
// but an assignment's two ranks must make it serialise again.
TEST_CASE("BroadcastLines gives every node's line as to_wire(...) serialised would") {
  RoundAssignment first{1, 0, 0, 4, 0, 8, "10.0.0.1", 4567, "job", true, {}, 0};
  RoundAssignment quoted = first;
  quoted.run_id = R"(a "base_rank":0,"group_rank":0 \ run)";
  quoted.restart_reason = {1, 3, 0,   "rank 3 on h: exit_code (\xff\xfe not UTF-8\n)",
                           1, 5, 1.5, {"node h (a) is suspect"}};
  quoted.backoff = 1.5;
  RoundAssignment later = first;
  later.round = 2;
  later.restart_count = 1;
  RoundAssignment moved = later;
  moved.master_addr = "10.0.0.9";
  moved.master_port = 29500;
  moved.agent_store = false;
  RoundAssignment bigger = moved;
  bigger.group_world_size = 10000;
  bigger.world_size = 80000;
  BroadcastLines lines;
  for (RoundAssignment shape : {first, first, quoted, later, moved, bigger, first}) {
    for (const auto& [group_rank, base_rank] : {std::pair{0, 0}, {1, 2}, {3, 6}, {9999, 79992}}) {
      shape.group_rank = group_rank;
      shape.base_rank = base_rank;
      const std::string expected = wire_text(to_wire(Assign{7, shape}));
      CAPTURE(expected);
      CHECK(lines.assign(shape) == expected);
    }
  }
  for (const Stop& stop : {Stop{1, 1, StopReason::kNodeLost, "node b was lost"}, Stop{2, 1, StopReason::kNodeLost, "node b was lost"},
                           Stop{1, 2, StopReason::kNodeLost, "node b was lost"},
                           Stop{1, 2, StopReason::kWorkerFailed, "node b was lost"},
                           Stop{1, 2, StopReason::kWorkerFailed, "rank 3 \"failed\" \xff"}}) {
    CHECK(lines.stop(stop) == wire_text(to_wire(stop)));
  }
}

TEST_CASE("a message missing a field is an error, not a default") {
  nlohmann::json j = RoundAssignment{};
  j.erase("master_port");
  CHECK_THROWS_AS(j.get<RoundAssignment>(), nlohmann::json::exception);
}

}  // namespace
TEST_CASE("heartbeats are numbered and acknowledged in one spelling, read without JSON") {
  using K = Heartbeat::Kind;
  CHECK(heartbeat_text({K::kSeq, 17}) == R"({"type":"heartbeat","seq":17})");
  CHECK(heartbeat_text({K::kAck, 0}) == R"({"type":"heartbeat","ack":0})");
  struct Row {
    std::string line;
    std::optional<Heartbeat> read;
  };
  for (const Row& row : {Row{R"({"type":"heartbeat","seq":17})", Heartbeat{K::kSeq, 17}},
                         Row{R"({"type":"heartbeat","ack":18446744073709551615})", Heartbeat{K::kAck, UINT64_MAX}},
                         Row{R"({"type":"heartbeat","ack":18446744073709551616})", std::nullopt},  // overflows
                         Row{R"({"type":"heartbeat","seq":})", std::nullopt},
                         Row{R"({"type":"heartbeat","seq":-1})", std::nullopt},
                         Row{R"({"type":"heartbeat","seq":+1})", std::nullopt},
                         Row{R"({"type":"heartbeat","seq":1 })", std::nullopt},
                         Row{R"({"type":"heartbeat","seq":1,"x":2})", std::nullopt},
                         Row{R"({"type":"heartbeat","seq":1)", std::nullopt},
                         Row{R"({"type":"heartbeat","seq")", std::nullopt},
                         Row{R"({"type":"heartbeat"})", std::nullopt},  // parsed as JSON instead
                         Row{"", std::nullopt}}) {
    CAPTURE(row.line);
    CHECK(read_heartbeat(row.line) == row.read);
  }
  // Any other spelling is a message of type "heartbeat", its number read from the JSON.
  CHECK(read_heartbeat_json(*parse_message(R"({ "seq": 3, "type": "heartbeat" })")) == Heartbeat{K::kSeq, 3});
  CHECK(read_heartbeat_json(*parse_message(R"({"type":"heartbeat","ack":4})")) == Heartbeat{K::kAck, 4});
  CHECK_FALSE(read_heartbeat_json(*parse_message(R"({"type":"heartbeat"})")));
  CHECK_FALSE(read_heartbeat_json(*parse_message(R"({"type":"heartbeat","seq":-3})")));
  CHECK_FALSE(read_heartbeat_json(*parse_message(R"({"type":"heartbeat","seq":"3"})")));
}

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

TEST_CASE("a peer's text comes out of parse_message printable: no control character but a message's lines") {
  struct Row {
    const char* key;
    std::string sent;
    std::string read;
  };
  const std::vector<Row> table = {
      {"cause", "plain text, UTF-8: \xc3\xa9", "plain text, UTF-8: \xc3\xa9"},
      {"cause", "red \x1b[31mtext\x1b[0m", "red ?[31mtext?[0m"},
      {"cause", "one\nddprun: forged", "one?ddprun: forged"},
      {"cause", "over\rddprun: forged", "over?ddprun: forged"},
      {"cause", "bell\x07 del\x7f tab\t", "bell? del? tab?"},
      {"cause",
       "C1 CSI \xc2\x9b"
       "2J, NEL \xc2\x85, not C1 \xc2\xa0",
       "C1 CSI ?2J, NEL ?, not C1 \xc2\xa0"},
      {"host", "h2\x1b[2J", "h2?[2J"},
      {"why", "a\nb", "a?b"},
      {"message", "first\n\tsecond\x1b[1m", "first\n\tsecond?[1m"},
      {"traceback", "Traceback\n  File \"a.py\"\r\n\x1b]0;title\x07", "Traceback\n  File \"a.py\"?\n?]0;title?"},
  };
  for (const Row& row : table) {
    CAPTURE(row.key);
    CAPTURE(row.sent);
    // Nested as a failure is in a finish.
    nlohmann::json sent = {{"type", "finish"},
                           {"outcome", {{"failures", nlohmann::json::array({{{row.key, row.sent}}})}}}};
    const auto read = parse_message(sent.dump());
    REQUIRE(read);
    CHECK((*read)["outcome"]["failures"][0][row.key] == row.read);
  }
  const auto list = parse_message(R"({"type":"spare","why":["a\u001bb"]})");
  REQUIRE(list);
  CHECK((*list)["why"][0] == "a?b");
}

TEST_CASE("a peer's JSON is taken nested kMaxMessageDepth deep, not deeper") {
  const auto arrays = [](int open, const std::string& inner) {
    return std::string(open, '[') + inner + std::string(open, ']');
  };
  const auto objects = [](int open) {
    std::string text;
    for (int i = 0; i < open; ++i) text += R"({"a":)";
    return text + "1" + std::string(open, '}');
  };
  CHECK(parse_peer_json(arrays(kMaxMessageDepth, "1")));
  CHECK_FALSE(parse_peer_json(arrays(kMaxMessageDepth + 1, "1")));
  CHECK(parse_peer_json(arrays(kMaxMessageDepth + 1, "")));  // the innermost array holds nothing
  CHECK_FALSE(parse_peer_json(arrays(kMaxMessageDepth + 2, "")));
  CHECK(parse_peer_json(objects(kMaxMessageDepth)));
  CHECK_FALSE(parse_peer_json(objects(kMaxMessageDepth + 1)));
  // Brackets inside strings, an escaped quote among them, are not nesting.
  const std::string brackets(kMaxMessageDepth + 5, '[');
  CHECK(parse_peer_json(R"({"a":")" + brackets + R"("})"));
  CHECK(parse_peer_json(R"({"a":"\")" + brackets + R"(\"","b":[1]})"));
  CHECK(parse_peer_json(arrays(kMaxMessageDepth, R"("]]]")")));
  CHECK_FALSE(parse_peer_json(arrays(kMaxMessageDepth + 1, R"("]]]")")));
  CHECK_FALSE(parse_peer_json(arrays(2, "1") + " x"));  // text after the value
  CHECK(parse_peer_json(" \t" + arrays(2, "1") + " "));
}

TEST_CASE("every integer from a peer is range-checked before it is narrowed to an int") {
  struct Case {
    const char* line;
    bool accepted;
  };
  const std::vector<Case> cases = {
      {R"({"type":"stop","round":2147483647})", true},
      {R"({"type":"stop","round":-2147483648})", true},
      {R"({"type":"stop","round":2147483648})", false},
      {R"({"type":"stop","round":-2147483649})", false},
      {R"({"type":"stop","round":4294967301})", false},  // 2^32+5: was read as 5
      {R"({"type":"stop","round":18446744073709551615})", false},
      {R"({"type":"stop","round":2.5})", false},  // was read as 2
      {R"({"type":"join","node":{"nproc":4294967297}})", false},
      {R"({"type":"finish","outcome":{"failures":[{"exit_code":4294967297}]}})", false},
      {R"({"type":"worker_failed","failure":{"timestamp":1e300}})", true},
      // Seconds are doubles: a fraction there is the value (it refused every node whose
      // --restart_window, --restart_backoff_max or heartbeat settings had one).
      {R"({"type":"join","node":{"restart":{"window":0.5,"backoff_max":2.5},"heartbeat_interval":0.25,"heartbeat_timeout":1.5}})", true},
      {R"({"type":"assign","assignment":{"backoff":2.5}})", true},
      {R"({"type":"join","node":{"nproc":1.5}})", false},
      // A version is compared unnarrowed (is_protocol_version), so that the peer is told.
      {R"({"type":"hello","version":4294967301})", true},
      {R"({"type":"hello","version":18446744073709551615})", true},
      {R"({"type":"hello","version":5.5})", false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    CHECK(parse_message(c.line).has_value() == c.accepted);
  }
  CHECK(parse_peer_json(R"({"rounds":3,"restarts":1})"));
  CHECK_FALSE(parse_peer_json(R"({"rounds":4294967299})"));
  CHECK_FALSE(parse_peer_json("{"));
}

TEST_CASE("a version is the protocol's only when it is that integer") {
  using nlohmann::json;
  CHECK(is_protocol_version(json(kProtocolVersion)));
  CHECK(is_protocol_version(json(static_cast<std::uint64_t>(kProtocolVersion))));
  CHECK_FALSE(is_protocol_version(json::parse("4294967301")));  // 2^32+5
  CHECK_FALSE(is_protocol_version(json::parse("18446744073709551615")));
  CHECK_FALSE(is_protocol_version(json::parse("-4294967291")));  // -(2^32)+5
  CHECK_FALSE(is_protocol_version(json(std::to_string(kProtocolVersion))));
  CHECK_FALSE(is_protocol_version(json(kProtocolVersion + 1.0)));
  CHECK_FALSE(is_protocol_version(json()));
}

TEST_CASE("a peer's failure, assignment and outcome are checked before anything acts on them") {
  const auto failure = [](int exit_code, int signal, int local_rank) {
    WorkerFailure f;
    f.exit_code = exit_code;
    f.signal = signal;
    f.local_rank = local_rank;
    return f;
  };
  struct FailureCase {
    WorkerFailure failure;
    std::string error;  // empty: accepted
  };
  const std::vector<FailureCase> failures = {
      {failure(1, 0, 0), ""},
      {failure(137, 9, 1), ""},
      {failure(255, 64, 1), ""},
      {failure(256, 0, 0), "a failure's exit code 256 is out of range"},  // would exit 0 on every node
      {failure(0, 0, 0), "a failure's exit code 0 is out of range"},
      {failure(-1, 0, 0), "a failure's exit code -1 is out of range"},
      {failure(1, 65, 0), "a failure's signal 65 is out of range"},
      {failure(1, -9, 0), "a failure's signal -9 is out of range"},
      {failure(1, 0, 2), "a failure's local rank 2 is out of range"},
      {failure(1, 0, -1), "a failure's local rank -1 is out of range"},
      {[&] {
         WorkerFailure f = failure(1, 0, 0);
         f.host = std::string(kMaxHostChars + 1, 'h');
         return f;
       }(),
       "a failure's host '" + std::string(kMaxShownChars, 'h') + "...' is not a host name"},
  };
  for (const FailureCase& c : failures) {
    CAPTURE(c.error);
    if (c.error.empty()) {
      CHECK_NOTHROW(check_failure(c.failure, 2));
    } else {
      CHECK_THROWS_WITH_AS(check_failure(c.failure, 2), c.error.c_str(), std::invalid_argument);
    }
  }

  const RoundAssignment good{3, 1, 1, 2, 2, 4, "10.0.0.1", 4567, "job", true};
  struct AssignmentCase {
    void (*change)(RoundAssignment&);
    std::string error;
  };
  const std::vector<AssignmentCase> assignments = {
      {[](RoundAssignment&) {}, ""},
      {[](RoundAssignment& a) { a.round = 0; }, "the round 0 is out of range"},
      {[](RoundAssignment& a) { a.restart_count = -1; }, "the restart count -1 is out of range"},
      {[](RoundAssignment& a) { a.group_world_size = 0; }, "the number of nodes 0 is out of range"},
      {[](RoundAssignment& a) { a.group_rank = 2; }, "the group rank 2 is out of range"},
      {[](RoundAssignment& a) { a.group_rank = -1; }, "the group rank -1 is out of range"},
      {[](RoundAssignment& a) { a.base_rank = 3; }, "the first rank 3 is out of range"},  // ranks 3, 4 of 4
      {[](RoundAssignment& a) { a.base_rank = -2; }, "the first rank -2 is out of range"},
      {[](RoundAssignment& a) { a.world_size = 3; }, "the first rank 2 is out of range"},
      {[](RoundAssignment& a) { a.master_port = 0; }, "MASTER_PORT 0 is out of range"},
      {[](RoundAssignment& a) { a.master_port = 65536; }, "MASTER_PORT 65536 is out of range"},
      {[](RoundAssignment& a) { a.snapshot_peers = {{"n", "10.0.0.1", 1}}; }, "the number of snapshot replicators 1 is out of range"},
      {[](RoundAssignment& a) { a.snapshot_peers.assign(static_cast<std::size_t>(a.group_world_size), {"n", "h", 0}); },
       "a snapshot replicator's port 0 is out of range"},
      {[](RoundAssignment& a) { a.master_addr.clear(); }, "MASTER_ADDR is empty"},
  };
  for (const AssignmentCase& c : assignments) {
    CAPTURE(c.error);
    RoundAssignment a = good;
    c.change(a);
    if (c.error.empty()) {
      CHECK_NOTHROW(check_assignment(a, 2));
    } else {
      CHECK_THROWS_WITH_AS(check_assignment(a, 2), c.error.c_str(), std::invalid_argument);
    }
  }

  JobOutcome outcome;
  CHECK_NOTHROW(check_outcome(outcome));
  outcome.exit_code = 255;
  CHECK_NOTHROW(check_outcome(outcome));
  outcome.exit_code = 256;
  CHECK_THROWS_WITH_AS(check_outcome(outcome), "the job's exit code 256 is out of range", std::invalid_argument);
  outcome.exit_code = 1;
  outcome.restarts = -1;
  CHECK_THROWS_WITH_AS(check_outcome(outcome), "the job's restarts -1 is out of range", std::invalid_argument);
}

}  // namespace ddprun::elastic
