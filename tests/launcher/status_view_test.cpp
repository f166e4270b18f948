// The job's live view and what /healthz and /status answer from it, as tables.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/status_view.hpp"

using namespace ddprun::launcher;

namespace {

// Rank `rank` (local rank the same) with process `pid`, which counts as hung after `deadline`.
RankView rank_view(int rank, pid_t pid, bool running, std::optional<double> deadline = std::nullopt) {
  RankView r;
  r.rank = rank;
  r.local_rank = rank;
  r.pid = pid;
  r.running = running;
  r.deadline = deadline;
  return r;
}

}  // namespace

TEST_CASE("when the job counts as hung, by the phase /status shows") {
  struct Row {
    const char* phase;
    std::string hung_after_a_hang;
  };
  const std::vector<Row> table = {
      {"waiting", ""},
      {"running", "a worker hung; the job is stopping"},
      {"stopping", "a worker hung; the job is stopping"},
      {"exiting", "a worker hung; the job is stopping"},
  };
  for (const auto& row : table) {
    CAPTURE(row.phase);
    CHECK(hung_text(row.phase, true) == row.hung_after_a_hang);
    CHECK(hung_text(row.phase, false).empty());
  }
}

TEST_CASE("a beat updates its rank's last beat and deadline, and the timeout in force") {
  JobView view;
  view.ranks = {{0, 0, 100, true, std::nullopt, std::nullopt}, {1, 1, 101, true, 3.0, 8.0}};
  record_beat(view, 0, 5.0, 42, 10.0, 5.0);
  CHECK(view.ranks[0].last_beat == 5.0);
  CHECK(view.ranks[0].step == 42);
  CHECK(view.ranks[0].deadline == 10.0);
  CHECK(view.ranks[1].last_beat == 3.0);
  CHECK(view.hang_timeout == 5.0);
  record_beat(view, 1, 6.0, std::nullopt, std::nullopt, 0);
  CHECK(!view.ranks[1].step);
  CHECK(view.ranks[1].last_beat == 6.0);
  CHECK(!view.ranks[1].deadline);
}

TEST_CASE("beats with steps make each rank's history; a new view keeps those of the same workers") {
  JobView view;
  view.ranks = {rank_view(0, 100, true), rank_view(1, 101, true)};
  record_beat(view, 0, 1.0, 10, std::nullopt, 0);
  record_beat(view, 0, 2.0, 20, std::nullopt, 0);
  record_beat(view, 0, 3.0, std::nullopt, std::nullopt, 0);  // a beat without a step
  record_beat(view, 1, 2.0, 5, std::nullopt, 0);
  CHECK(view.ranks[0].steps.samples().size() == 2);
  CHECK(view.ranks[1].steps.samples().size() == 1);
  struct Row {
    const char* what;
    int local_rank;
    pid_t pid;
    std::size_t samples;
  };
  const std::vector<Row> table = {
      {"the same worker keeps its history", 0, 100, 2},
      {"a new process of the local rank (a restart) starts afresh", 0, 200, 0},
      {"another local rank with that pid is another worker", 1, 100, 0},
  };
  for (const auto& row : table) {
    CAPTURE(std::string(row.what));
    JobView fresh;
    RankView r;
    r.local_rank = row.local_rank;
    r.pid = row.pid;
    fresh.ranks = {r};
    keep_step_histories(fresh, view);
    CHECK(fresh.ranks[0].steps.samples().size() == row.samples);
  }
}

TEST_CASE("/status: each rank's state and pace, the job's progress") {
  JobView view;
  view.phase = "running";
  view.host = "node3";
  view.nodes = 2;
  view.node_rank = 1;
  view.hang_timeout = 100;
  view.ranks = {rank_view(0, 100, true, 200.0), rank_view(1, 101, true, 50.0), rank_view(2, 102, false),
                rank_view(3, -1, false)};
  for (int t = 0; t <= 60; ++t) {
    record_beat(view, 0, t, t * 10, 200.0, 100);  // 10 steps a second
    record_beat(view, 1, t, t * 5, 50.0, 100);    // 5: a straggler, and hung at 60 (past its deadline)
  }
  record_beat(view, 2, 0, 7, std::nullopt, 100);
  const auto j = nlohmann::json::parse(status_json(view, 60.0));
  struct Row {
    int rank;
    const char* state;
    bool hung;
    nlohmann::json step;
    nlohmann::json rate;
  };
  const std::vector<Row> table = {
      {0, "running", false, 600, 10.0},
      {1, "running", true, 300, 5.0},
      {2, "exited", false, 7, nullptr},
      {3, "starting", false, nullptr, nullptr},
  };
  for (const auto& row : table) {
    CAPTURE(row.rank);
    const auto& r = j["ranks"][row.rank];
    CHECK(r["state"] == row.state);
    CHECK(r["hung"] == row.hung);
    CHECK(r["step"] == row.step);
    if (row.rate.is_null()) {
      CHECK(r["steps_per_second"].is_null());
    } else {
      CHECK(r["steps_per_second"].get<double>() == doctest::Approx(row.rate.get<double>()));
      CHECK(r["since_last_step"].get<double>() == doctest::Approx(0.0));
      CHECK(r["step_time"].get<double>() == doctest::Approx(1 / row.rate.get<double>()));
    }
  }
  CHECK(j["total_steps"] == 907);
  CHECK(j["slowest_rank"] == 1);
  CHECK(j["stragglers"] == nlohmann::json::array({1}));
  CHECK(j["median_step_time"].get<double>() == doctest::Approx(0.15));
  CHECK(j["host"] == "node3");
  CHECK(j["nodes"] == 2);
  CHECK(j["node_rank"] == 1);
  CHECK(j["healthy"] == false);
  const auto before = nlohmann::json::parse(status_json(JobView{}, 0));
  CHECK(before["nodes"].is_null());
  CHECK(before["node_rank"].is_null());
  CHECK(before["slowest_rank"].is_null());
  CHECK(before["stragglers"] == nlohmann::json::array());
  CHECK(before["total_steps"] == 0);
  CHECK(before["spare"].is_null());
  JobView spare;
  spare.phase = "spare";
  spare.spare = 2;
  const auto waiting = nlohmann::json::parse(status_json(spare, 0));
  CHECK(waiting["phase"] == "spare");
  CHECK(waiting["spare"] == 2);
  CHECK(waiting["healthy"] == true);
  // The job's spares, known where the coordinator runs; the quarantined nodes, on every node.
  CHECK(before["spares"].is_null());
  CHECK(before["quarantined"] == nlohmann::json::array());
  JobView host;
  host.spares = std::vector<std::string>{"h4 (10.0.0.4)", "h5 (10.0.0.5)"};
  host.quarantined = {{"h2 (10.0.0.2)", "2 segfaults"}};
  const auto coordinator = nlohmann::json::parse(status_json(host, 0));
  CHECK(coordinator["spares"] == nlohmann::json::parse(R"j(["h4 (10.0.0.4)", "h5 (10.0.0.5)"])j"));
  CHECK(coordinator["quarantined"] == nlohmann::json::parse(R"j([{"node": "h2 (10.0.0.2)", "why": "2 segfaults"}])j"));
}

TEST_CASE("/healthz and /status from a job view") {
  JobView view;
  view.phase = "running";
  view.attempt = 1;
  view.round = 3;
  view.restart_count = 1;
  view.max_restarts = 3;
  view.world_size = 2;
  view.hang_timeout = 5;
  view.ranks = {{0, 0, 100, true, 10.0, 15.0, 7}, {1, 1, 101, true, std::nullopt, 16.0}};
  CHECK(healthz_response(view, 14.9).first == 200);
  const auto [code, body] = healthz_response(view, 15.0);
  CHECK(code == 503);
  CHECK(body.find("rank 0: no progress for 5.0 s") != std::string::npos);
  const auto j = nlohmann::json::parse(status_json(view, 12.0));
  CHECK(j["restarts_left"] == 2);
  CHECK(j["healthy"] == true);
  CHECK(j["ranks"][0]["last_beat_age"].get<double>() == doctest::Approx(2.0));
  CHECK(j["ranks"][1]["last_beat_age"].is_null());
  CHECK(j["ranks"][0]["step"] == 7);
  CHECK(j["ranks"][1]["step"].is_null());
  CHECK(j["last_failure"].is_null());
  CHECK(j["restart_reason"].is_null());
  view.last_failure = FailureView{1, "node7", 1, "cuda_oom", true, "torch.OutOfMemoryError: CUDA out of memory."};
  view.restart_reason = "restart 1 of 3 after rank 1 on node7: cuda_oom";
  const auto failed = nlohmann::json::parse(status_json(view, 12.0));
  CHECK(failed["last_failure"] == nlohmann::json::parse(R"({"rank": 1, "host": "node7", "exit_code": 1, "kind": "cuda_oom",
      "retryable": true, "cause": "torch.OutOfMemoryError: CUDA out of memory."})"));
  CHECK(failed["restart_reason"] == "restart 1 of 3 after rank 1 on node7: cuda_oom");
  view.hung = "a worker hung";
  CHECK(healthz_response(view, 0).first == 503);
}

TEST_CASE("the HTTP response to a request's head") {
  JobView view;
  view.phase = "running";
  view.hung = "";
  const std::string ok_body = "ok\n";
  struct Row {
    const char* head;
    const char* status_line;
    bool has_body;
  };
  const Row rows[] = {
      {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK", true},
      {"GET /healthz?verbose=1 HTTP/1.0\r\n\r\n", "HTTP/1.1 200 OK", true},
      {"HEAD /healthz HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK", false},
      {"GET /status HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK", true},
      {"GET /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK", true},
      {"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found", true},
      {"POST /status HTTP/1.1\r\nContent-Length: 2\r\n\r\n", "HTTP/1.1 405 Method Not Allowed", true},
      {"GET /status\r\n\r\n", "HTTP/1.1 400 Bad Request", true},
      {"GET /status SPDY/3\r\n\r\n", "HTTP/1.1 400 Bad Request", true},
      {"GET /a b HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request", true},
      {"\r\n\r\n", "HTTP/1.1 400 Bad Request", true},
      {"", "HTTP/1.1 400 Bad Request", true},
  };
  for (const auto& row : rows) {
    CAPTURE(row.head);
    const std::string response = http_response(row.head, view, 0);
    CHECK(response.rfind(std::string(row.status_line) + "\r\n", 0) == 0);
    CHECK(response.find("\r\nConnection: close\r\n") != std::string::npos);
    const auto end = response.find("\r\n\r\n");
    REQUIRE(end != std::string::npos);
    const std::string body = response.substr(end + 4);
    const auto length = response.find("Content-Length: ");
    REQUIRE(length != std::string::npos);
    const std::size_t declared = std::stoul(response.substr(length + 16));
    // HEAD declares the length GET would send, and sends nothing.
    CHECK(body.size() == (row.has_body ? declared : 0));
    CHECK(declared > 0);
  }
  CHECK(http_response("GET /healthz HTTP/1.1\r\n\r\n", view, 0).substr(
            http_response("GET /healthz HTTP/1.1\r\n\r\n", view, 0).size() - ok_body.size()) == ok_body);
  CHECK(http_response("GET /status HTTP/1.1\r\n\r\n", view, 0).find("Content-Type: application/json") !=
        std::string::npos);
  view.hung = "a worker hung";
  CHECK(http_response("GET /healthz HTTP/1.1\r\n\r\n", view, 0).rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
}

TEST_CASE("/status: the goodput ledger as of the request, null without one") {
  JobView view;
  CHECK(nlohmann::json::parse(status_json(view, 5))["goodput"].is_null());
  GoodputLedger ledger(0, false);
  ledger.workers_started(0, 1);
  ledger.progress(1, 0);
  view.goodput = ledger;
  const auto j = nlohmann::json::parse(status_json(view, 4));
  CHECK(j["goodput"]["time_to_start"] == 1.0);
  CHECK(j["goodput"]["training_seconds"] == 3.0);
  CHECK(j["goodput"]["ett_percent"] == 75.0);
  CHECK(j["goodput"]["summary"] == "goodput 75.0%: started in 1.0 s, no failures");
}
