// The job's live view and what /healthz and /status answer from it, as tables.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/status_view.hpp"

using namespace ddprun::launcher;

TEST_CASE("the phase as /status names it, and when the job counts as hung") {
  struct Row {
    Phase phase;
    const char* name;
    std::string hung_after_a_hang;
  };
  const std::vector<Row> table = {
      {Phase::kWaitingForRound, "waiting", ""},
      {Phase::kRunning, "running", "a worker hung; the job is stopping"},
      {Phase::kStopping, "stopping", "a worker hung; the job is stopping"},
      {Phase::kExiting, "exiting", "a worker hung; the job is stopping"},
  };
  for (const auto& row : table) {
    CHECK(std::string(phase_name(row.phase)) == row.name);
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
      {"GET /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found", true},
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
