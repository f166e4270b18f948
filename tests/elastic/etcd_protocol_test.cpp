// The etcd rendezvous's pure parts: base64 as etcd's JSON gateway writes it, prefix ranges,
// the job's key layout, and the gateway's watch messages and transactions.
#include "etcd/etcd_protocol.hpp"
#include "core/rendezvous_protocol.hpp"

#include <doctest/doctest.h>

namespace ddprun::elastic::etcd {
namespace {

TEST_CASE("base64: RFC 4648 test vectors, both ways; bad text is refused") {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}, {std::string("\0\xff\xfe", 3), "AP/+"}};
  for (const auto& vector : vectors) {
    const std::string& bytes = vector.first;
    const std::string& text = vector.second;
    CAPTURE(text);
    CHECK(base64_encode(bytes) == text);
    CHECK(base64_decode(text) == bytes);
  }
  for (const std::string bad : {"Zg=", "Zg", "Z===", "Zm9v!A==", "=Zm9", "Zg==Zg=="}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(base64_decode(bad), std::invalid_argument);
  }
}

TEST_CASE("prefix_end: the first key after every key with the prefix") {
  CHECK(prefix_end("/ddprun/v1/a/") == "/ddprun/v1/a0");
  CHECK(prefix_end("a") == "b");
  CHECK(prefix_end(std::string("a\xff", 2)) == "b");
  CHECK(prefix_end(std::string("\xff\xff", 2)) == std::string(1, '\0'));
}

TEST_CASE("the job's keys; a run id with '/' or '%' cannot reach into another job's keys") {
  const JobKeys keys("job42");
  CHECK(keys.prefix() == "/ddprun/v1/job42/");
  CHECK(keys.leader() == "/ddprun/v1/job42/leader");
  CHECK(keys.state() == "/ddprun/v1/job42/state");
  CHECK(keys.node("h1-7-0000abcd") == "/ddprun/v1/job42/nodes/h1-7-0000abcd");
  CHECK(keys.event("n", 3) == "/ddprun/v1/job42/events/n/0000000000000003");
  CHECK(keys.message("n", "L", 12) == "/ddprun/v1/job42/to/n/L-0000000000000012");
  CHECK(JobKeys("a/b").prefix() == "/ddprun/v1/a%2Fb/");
  CHECK(JobKeys("a%2Fb").prefix() == "/ddprun/v1/a%252Fb/");

  using Kind = JobKeys::Kind;
  struct Case {
    std::string key;
    Kind kind;
    std::string node;
  };
  for (const Case& c : std::vector<Case>{{keys.leader(), Kind::kLeader, ""},
                                         {keys.state(), Kind::kState, ""},
                                         {keys.node("n1"), Kind::kNode, "n1"},
                                         {keys.event("n1", 1), Kind::kEvent, "n1"},
                                         {keys.message("n2", "n1", 1), Kind::kMessage, "n2"},
                                         {"/ddprun/v1/job42/nodes/", Kind::kOther, ""},
                                         {"/ddprun/v1/job42/nodes/a/b", Kind::kOther, ""},
                                         {"/ddprun/v1/job42/events/n1", Kind::kOther, ""},
                                         {"/ddprun/v1/job42/to/n1/", Kind::kOther, ""},
                                         {"/ddprun/v1/job4/leader", Kind::kOther, ""},
                                         {"/ddprun/v1/job42/leaderx", Kind::kOther, ""}}) {
    CAPTURE(c.key);
    const auto parsed = keys.parse(c.key);
    CHECK(parsed.kind == c.kind);
    CHECK(parsed.node == c.node);
  }
}

TEST_CASE("node ids are unique per process and free of '/'") {
  CHECK(make_node_id("h1", 42, 0xabc) == "h1-42-00000abc");
  CHECK(make_node_id("a/b%c", 1, 0xffffffff) == "a_b_c-1-ffffffff");
}

TEST_CASE("watch messages as the gateway streams them") {
  const auto message = nlohmann::json::parse(R"({"result": {"header": {"revision": "9"}, "events": [
      {"kv": {"key": "YQ==", "create_revision": "8", "mod_revision": "8", "version": "1", "value": "MQ=="}},
      {"type": "DELETE", "kv": {"key": "Yg==", "mod_revision": "9"}},
      {"kv": {"key": "YQ==", "create_revision": "8", "mod_revision": "10", "version": "2", "value": "MQ=="}}]}})");
  const auto events = parse_watch_message(message);
  REQUIRE(events.size() == 3);
  CHECK_FALSE(events[0].deleted);
  CHECK(events[0].key == "a");
  CHECK(events[0].value == "1");
  CHECK(events[0].mod_revision == 8);
  CHECK(events[0].version == 1);  // created by this put
  CHECK(events[1].deleted);
  CHECK(events[1].key == "b");
  CHECK(events[1].mod_revision == 9);
  CHECK(events[1].version == 0);
  CHECK(events[2].version == 2);  // the same put again: its readers ignore it
  CHECK(parse_watch_message(nlohmann::json::parse(R"({"result": {"header": {}, "created": true}})")).empty());
  CHECK_THROWS_WITH(parse_watch_message(nlohmann::json::parse(
                        R"({"result": {"canceled": true, "cancel_reason": "mvcc: required revision has been compacted"}})")),
                    "etcd canceled the watch: mvcc: required revision has been compacted");
  CHECK_THROWS_AS(parse_watch_message(nlohmann::json::parse(R"({"error": {"grpc_code": 14, "message": "no leader"}})")),
                  std::runtime_error);
}

TEST_CASE("64-bit numbers come as strings, zero values not at all") {
  const auto j = nlohmann::json::parse(R"({"ID": "7587871391429342721", "TTL": 5})");
  CHECK(json_int(j, "ID") == 7587871391429342721);
  CHECK(json_int(j, "TTL") == 5);
  CHECK(json_int(j, "missing") == 0);
}

TEST_CASE("a number that is not a whole signed 64-bit integer is refused, naming the field") {
  struct Row {
    const char* json;
    bool accepted;
    std::int64_t value;
  };
  const Row rows[] = {
      {R"({"n": "-1"})", true, -1},  // an expired lease's TTL
      {R"({"n": "9223372036854775807"})", true, 9223372036854775807},
      {R"({"n": 42})", true, 42},
      {R"({"n": "9223372036854775808"})", false, 0},  // 2^63
      {R"({"n": 9223372036854775808})", false, 0},
      {R"({"n": "12abc"})", false, 0},
      {R"({"n": ""})", false, 0},
      {R"({"n": " 7"})", false, 0},
      {R"({"n": 1.5})", false, 0},
      {R"({"n": true})", false, 0},
      {R"({"n": null})", false, 0},
  };
  for (const Row& row : rows) {
    CAPTURE(row.json);
    const auto j = nlohmann::json::parse(row.json);
    if (row.accepted) {
      CHECK(json_int(j, "n") == row.value);
    } else {
      CHECK_THROWS_WITH_AS(json_int(j, "n"), doctest::Contains("etcd sent n="), std::runtime_error);
    }
  }
}

TEST_CASE("the election: create the leader key only if absent, and read the job in the same revision") {
  const auto txn = create_and_read_txn("/p/leader", "me", 99, "/p/");
  CHECK(txn["compare"] == nlohmann::json::parse(R"([{"key": "L3AvbGVhZGVy", "target": "CREATE", "create_revision": "0"}])"));
  CHECK(txn["success"][0]["request_put"] ==
        nlohmann::json::parse(R"({"key": "L3AvbGVhZGVy", "value": "bWU=", "lease": "99"})"));
  const auto read = nlohmann::json::parse(R"({"request_range": {"key": "L3Av", "range_end": "L3Aw"}})");
  CHECK(txn["success"][1] == read);
  CHECK(txn["failure"] == nlohmann::json::array({read}));
}

TEST_CASE("a put, as a transaction's operation: base64 key and value, a lease only when there is one") {
  CHECK(put_op("/p/a", "v", 7) ==
        nlohmann::json::parse(R"({"request_put": {"key": "L3AvYQ==", "value": "dg==", "lease": "7"}})"));
  CHECK(put_op("/p/a", "v", 0) == nlohmann::json::parse(R"({"request_put": {"key": "L3AvYQ==", "value": "dg=="}})"));
}

TEST_CASE("the job's state: the history a new leader goes on from, restart times carried over the epoch") {
  JobState state;
  state.rounds = 3;
  state.restarts = 2;
  state.history.restart =
      RestartPolicy::History{{100.5, 160.25}, 2, "ValueError at a.py:3", "python_exception at a.py:3"};
  state.history.suspects[7587871391] = {{1700000000.5, FailureKind::kSegfault}};
  state.history.quarantined = {{"h2 (10.0.0.2)", "its workers were ..."}};
  state.history.restart_reason = {2, 3, 0,   "rank 1 on h2: segfault",
                                  1, 5, 1.5, {"node h2 (10.0.0.2) is quarantined: ..."}};
  // Written on a host whose monotonic 0 is the epoch's 1000, read on one whose is 5000.
  const std::string text = state_value(state, 1000);
  const auto value = parse_peer_json(text);
  REQUIRE(value);  // fractions only in "timestamp"s, revisions as strings: a peer's JSON
  const JobState read = parse_state(*value, -5000);
  CHECK(read.rounds == 3);
  CHECK(read.restarts == 2);
  REQUIRE(read.history.restart);
  CHECK(read.history.restart->restarts == std::vector<double>{100.5 + 1000 - 5000, 160.25 + 1000 - 5000});
  CHECK(read.history.restart->no_progress == 2);
  CHECK(read.history.restart->last_exception == "ValueError at a.py:3");
  CHECK(read.history.restart->last_counted == "python_exception at a.py:3");
  CHECK(read.history.suspects == state.history.suspects);
  REQUIRE(read.history.quarantined.size() == 1);
  CHECK(read.history.quarantined[0].node == "h2 (10.0.0.2)");
  CHECK(read.history.restart_reason == state.history.restart_reason);

  // A restart history of an earlier version, without the last failure counted: a new count.
  nlohmann::json earlier = *value;
  earlier["restart_history"].erase("last_counted");
  CHECK(parse_state(earlier, 0).history.restart->last_counted.empty());

  // A state of an earlier version: rounds and restarts only, and no restart history.
  const JobState old = parse_state(nlohmann::json::parse(R"({"rounds": 4, "restarts": 1})"), 0);
  CHECK(old.rounds == 4);
  CHECK(old.restarts == 1);
  CHECK_FALSE(old.history.restart);
  CHECK(old.history.suspects.empty());
  CHECK_THROWS_AS(parse_state(nlohmann::json::parse(R"({"rounds": "x"})"), 0), nlohmann::json::exception);
}

}  // namespace
}  // namespace ddprun::elastic::etcd
