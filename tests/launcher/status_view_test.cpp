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
  view.hung = "a worker hung";
  CHECK(healthz_response(view, 0).first == 503);
}
