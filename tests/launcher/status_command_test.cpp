// `ddprun status`: its argument, the answer it accepts, the table it draws, as tables; and the
// command against a real status server on loopback.
#include <doctest/doctest.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/exit_codes.hpp"
#include "ddprun/user_error.hpp"
#include "report/status_command.hpp"
#include "report/status_server.hpp"

using namespace ddprun::launcher;

TEST_CASE("the [HOST:]PORT of `ddprun status`") {
  struct Row {
    const char* text;
    const char* host;  // nullptr: refused
    const char* port;
  };
  const std::vector<Row> table = {
      {"29600", "127.0.0.1", "29600"},
      {"node3:29600", "node3", "29600"},
      {"10.0.0.7:1", "10.0.0.7", "1"},
      {"[::1]:8080", "::1", "8080"},
      {"http://127.0.0.1:41234/status", "127.0.0.1", "41234"},
      {"http://node3:80", "node3", "80"},
      {"65535", "127.0.0.1", "65535"},
      {"", nullptr, nullptr},
      {"0", nullptr, nullptr},
      {"65536", nullptr, nullptr},
      {"99999999999999999999", nullptr, nullptr},
      {"node3", nullptr, nullptr},
      {"node3:", nullptr, nullptr},
      {":29600", nullptr, nullptr},
      {"::1:8080", nullptr, nullptr},
      {"[::1]", nullptr, nullptr},
      {"[::1:8080", nullptr, nullptr},
      {"node3:29600x", nullptr, nullptr},
      {"node3:-1", nullptr, nullptr},
  };
  for (const auto& row : table) {
    CAPTURE(row.text);
    if (row.host == nullptr) {
      try {
        parse_status_target(row.text);
        FAIL("accepted");
      } catch (const ddprun::UserError& e) {
        CHECK(e.exit_code() == ddprun::exit_code::kUsage);
        CHECK(std::string(e.what()).find("expected [HOST:]PORT") != std::string::npos);
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
      }
      continue;
    }
    const StatusTarget t = parse_status_target(row.text);
    CHECK(t.host == row.host);
    CHECK(t.port == row.port);
  }
}

TEST_CASE("the answers `ddprun status` takes, and the ones it refuses") {
  struct Row {
    const char* response;
    bool taken;
  };
  const std::vector<Row> table = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{\"ranks\":[]}", true},
      {"HTTP/1.0 200 OK\r\n\r\n{\"ranks\":[], \"phase\":\"running\"}", true},
      {"HTTP/1.1 404 Not Found\r\n\r\nnot found", false},
      {"HTTP/1.1 200 OK\r\n\r\n{\"phase\":\"running\"}", false},  // no ranks: not ddprun's
      {"HTTP/1.1 200 OK\r\n\r\nok", false},
      {"HTTP/1.1 200 OK\r\n", false},
      {"SSH-2.0-OpenSSH_9.2\r\n", false},
      {"", false},
  };
  for (const auto& row : table) {
    CAPTURE(row.response);
    if (row.taken) {
      CHECK(status_from_response(row.response, "h:1").is_object());
      continue;
    }
    try {
      status_from_response(row.response, "h:1");
      FAIL("taken");
    } catch (const ddprun::UserError& e) {
      CHECK(e.exit_code() == ddprun::exit_code::kRendezvous);
      CHECK(std::string(e.what()).rfind("status h:1: ", 0) == 0);
    }
  }
}

TEST_CASE("the table: the job line, then a row a rank") {
  const auto status = nlohmann::json::parse(R"({
    "phase": "running", "attempt": 1, "round": 3, "restart_count": 1, "restarts_left": 2,
    "world_size": 4, "host": "node3", "node_rank": 1, "nodes": 2, "hang_timeout": 30.0,
    "healthy": false, "total_steps": 2412, "slowest_rank": 3, "stragglers": [3],
    "median_step_time": 0.1,
    "ranks": [
      {"rank": 2, "local_rank": 0, "pid": 4242, "state": "running", "running": true, "hung": false,
       "last_beat_age": 0.05, "step": 1210, "steps_per_second": 9.987, "since_last_step": 0.04,
       "step_time": 0.1001},
      {"rank": 3, "local_rank": 1, "pid": 4243, "state": "running", "running": true, "hung": true,
       "last_beat_age": 31.2, "step": 1202, "steps_per_second": 5.0, "since_last_step": 31.2,
       "step_time": 0.2},
      {"rank": 4, "local_rank": 2, "pid": -1, "state": "starting", "running": false, "hung": false,
       "last_beat_age": null, "step": null, "steps_per_second": null, "since_last_step": null,
       "step_time": null}
    ]})");
  const std::string expected =
      "job: running, round 3, attempt 1, restarts 1 (2 left), node node3 (1 of 2), NOT healthy, hang timeout 30 s; "
      "2412 steps in all, slowest rank 3, stragglers: 3\n"
      "rank  node    pid  state     steps  steps/s  since last step  hung?\n"
      "   2  node3  4242  running    1210     9.99            0.0 s  no\n"
      "   3  node3  4243  running    1202     5.00           31.2 s  HUNG\n"
      "   4  node3    -1  starting      -        -                -  no\n";
  CHECK(format_status({status}) == expected);
}

TEST_CASE("the table of several nodes: the job's ranks by rank, the pace of all of them") {
  const auto node = [](const char* host, int node_rank, const char* phase, bool healthy, nlohmann::json ranks) {
    return nlohmann::json{{"phase", phase}, {"attempt", 0}, {"round", 2}, {"restart_count", 0}, {"restarts_left", 0},
                          {"host", host}, {"node_rank", node_rank}, {"nodes", 2}, {"hang_timeout", nullptr},
                          {"healthy", healthy}, {"ranks", ranks}};
  };
  const auto rank = [](int r, int step, double rate) {
    return nlohmann::json{{"rank", r}, {"pid", 100 + r}, {"state", "running"}, {"running", true}, {"hung", false},
                          {"step", step}, {"steps_per_second", rate}, {"since_last_step", 0.5},
                          {"step_time", 1 / rate}};
  };
  // Node b answered first; rank 1 (on node b) is the straggler of the job, not of its node alone.
  const std::vector<nlohmann::json> nodes = {
      node("b", 1, "running", true, {rank(3, 100, 10.0), rank(1, 60, 5.0)}),
      node("a", 0, "stopping", false, {rank(0, 100, 10.0), rank(2, 100, 10.0)}),
  };
  const std::string expected =
      "job: running/stopping, round 2, attempt 0, restarts 0 (0 left), nodes b (1 of 2), a (0 of 2), NOT healthy; "
      "360 steps in all, slowest rank 1, stragglers: 1\n"
      "rank  node  pid  state    steps  steps/s  since last step  hung?\n"
      "   0  a     100  running    100    10.00            0.5 s  no\n"
      "   1  b     101  running     60     5.00            0.5 s  no\n"
      "   2  a     102  running    100    10.00            0.5 s  no\n"
      "   3  b     103  running    100    10.00            0.5 s  no\n";
  CHECK(format_status(nodes) == expected);
}

TEST_CASE("the table names the job's spares and quarantined nodes under the job line") {
  const auto node = [](const char* host, nlohmann::json spares, nlohmann::json quarantined) {
    return nlohmann::json{{"phase", "running"}, {"attempt", 0}, {"round", 3}, {"restart_count", 2},
                          {"restarts_left", 1}, {"host", host}, {"node_rank", 0}, {"nodes", 3},
                          {"hang_timeout", nullptr}, {"healthy", true}, {"ranks", nlohmann::json::array()},
                          {"spares", spares}, {"quarantined", quarantined}};
  };
  const auto q = nlohmann::json::parse(R"j([{"node": "c (10.0.0.4)", "why": "2 segfaults"}])j");
  // Node b does not run the coordinator (spares null); node a, the host, lists them.
  const std::string text = format_status({node("b", nullptr, q), node("a", {"d (10.0.0.5)"}, q)});
  CHECK(text.find("\nspares: d (10.0.0.5)\nquarantined: c (10.0.0.4): 2 segfaults\nrank") != std::string::npos);
  const std::string quiet = format_status({node("a", nlohmann::json::array(), nlohmann::json::array())});
  CHECK(quiet.find("spares") == std::string::npos);
  CHECK(quiet.find("quarantined") == std::string::npos);
}

TEST_CASE("the table says each node's goodput line under the job line") {
  auto node = [](const char* host, nlohmann::json goodput) {
    return nlohmann::json{{"phase", "running"}, {"host", host}, {"healthy", true}, {"ranks", nlohmann::json::array()},
                          {"goodput", std::move(goodput)}};
  };
  const std::string out =
      format_status({node("h1", {{"summary", "goodput 96.1%: started in 4.2 s, no failures"}}), node("h2", nullptr)});
  CHECK(out.find("\nh1: goodput 96.1%: started in 4.2 s, no failures\n") != std::string::npos);
  CHECK(out.find("h2: ") == std::string::npos);  // a node without a ledger (an older ddprun) has no line
}

TEST_CASE("an answer with fields of other types than ddprun writes is refused, not drawn") {
  const auto odd = nlohmann::json::parse(R"({"ranks": [{"rank": "zero", "running": "yes"}]})");
  CHECK_THROWS_AS(format_status({odd}), nlohmann::json::exception);
}

TEST_CASE("`ddprun status` against a real status server, and where none listens") {
  StatusServer server("127.0.0.1", 0);
  JobView view;
  view.phase = "running";
  view.host = "here";
  view.nodes = 1;
  view.node_rank = 0;
  RankView r;
  r.pid = 4242;
  r.running = true;
  r.step = 7;
  view.ranks = {r};
  server.publish(view);
  std::ostringstream out;
  CHECK(status_command({std::to_string(server.port())}, out) == 0);
  CHECK(out.str().rfind("job: running, round -1, attempt -1", 0) == 0);
  CHECK(out.str().find("\n   0  here  4242  running      7") != std::string::npos);
  std::ostringstream twice;
  CHECK(status_command({std::to_string(server.port()), "127.0.0.1:" + std::to_string(server.port())}, twice) == 0);
  CHECK(twice.str().find("nodes here (0 of 1), here (0 of 1)") != std::string::npos);

  // A port that was free a moment ago: refused, one line, exit 69.
  int closed = 0;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    closed = a.local_endpoint().port();
  }
  struct Row {
    std::vector<std::string> args;
    int exit_code;
    const char* says;
  };
  const std::vector<Row> table = {
      {{"127.0.0.1:" + std::to_string(closed)}, ddprun::exit_code::kRendezvous, "running there?"},
      {{}, ddprun::exit_code::kUsage, "no [HOST:]PORT given"},
      {{std::to_string(server.port()), "127.0.0.1:" + std::to_string(closed)}, ddprun::exit_code::kRendezvous,
       "running there?"},  // one node of two gone
      {{std::to_string(server.port()), "node3:"}, ddprun::exit_code::kUsage, "node3:"},
      {{"--bogus", "1"}, ddprun::exit_code::kUsage, "unknown option --bogus"},
      {{"no.such.host.invalid:1"}, ddprun::exit_code::kRendezvous, "cannot resolve"},
  };
  for (const auto& row : table) {
    CAPTURE(std::string(row.says));
    std::ostringstream ignored;
    try {
      status_command(row.args, ignored);
      FAIL("succeeded");
    } catch (const ddprun::UserError& e) {
      CHECK(e.exit_code() == row.exit_code);
      CHECK(std::string(e.what()).find(row.says) != std::string::npos);
    }
  }
  std::ostringstream help;
  CHECK(status_command({"--help"}, help) == 0);
  CHECK(help.str().rfind("Usage: ddprun status", 0) == 0);
}
