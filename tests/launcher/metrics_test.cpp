// GET /metrics: the view in Prometheus' text format 0.0.4, as tables.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "report/metrics.hpp"
#include "report/status_view.hpp"

using namespace ddprun::launcher;

TEST_CASE("label values escaped as the text format says") {
  struct Row {
    std::string value;
    std::string written;
  };
  const std::vector<Row> table = {
      {"job42", "job42"},
      {"", ""},
      {"a\"b", "a\\\"b"},
      {"a\\b", "a\\\\b"},
      {"a\nb", "a\\nb"},
      {"\\n", "\\\\n"},                         // a backslash and an n, not a line feed
      {"tab\there", "tab\there"},               // only \, " and line feed are escaped
      {"caf\xc3\xa9", "caf\xc3\xa9"},           // UTF-8 as it is
      {"bad\xff", "bad\xef\xbf\xbd"},           // not UTF-8: U+FFFD
      {std::string("nul\0x", 5), std::string("nul\0x", 5)},
  };
  for (const auto& row : table) {
    CAPTURE(row.value);
    CHECK(escape_label_value(row.value) == row.written);
  }
}

TEST_CASE("the exposition of a job view") {
  JobView view;
  view.phase = "running";
  view.restart_count = 2;
  view.max_restarts = 3;
  view.world_size = 4;
  view.host = "node\"7";
  view.run_id = "job\\42\n";
  view.nodes = 2;
  view.node_rank = 1;
  view.rounds_started = 3;
  view.hangs_found = 1;
  view.hang_timeout = 30;
  view.failures = {{"exit_code", 1}, {"hang", 1}, {"signal", 0}};
  RankView a;
  a.rank = 2;
  a.local_rank = 0;
  a.pid = 100;
  a.running = true;
  a.last_beat = 9.5;
  a.deadline = 39.5;
  a.step = 1200;
  RankView b = a;
  b.rank = 3;
  b.local_rank = 1;
  b.pid = 101;
  b.last_beat = std::nullopt;
  b.step = std::nullopt;
  b.running = false;
  view.ranks = {a, b};
  const std::string expected = std::string() +
      "# HELP ddprun_info ddprun's version, the job's run id (--rdzv_id) and this node's host name.\n"
      "# TYPE ddprun_info gauge\n"
      "ddprun_info{version=\"" DDPRUN_VERSION "\",run_id=\"job\\\\42\\n\",host=\"node\\\"7\"} 1\n"
      "# HELP ddprun_restarts_total Restarts of the job after a failure so far, job-wide (TORCHELASTIC_RESTART_COUNT).\n"
      "# TYPE ddprun_restarts_total counter\n"
      "ddprun_restarts_total 2\n"
      "# HELP ddprun_rounds_total Rounds in which this node started its workers.\n"
      "# TYPE ddprun_rounds_total counter\n"
      "ddprun_rounds_total 3\n"
      "# HELP ddprun_workers_running This node's workers running now.\n"
      "# TYPE ddprun_workers_running gauge\n"
      "ddprun_workers_running 1\n"
      "# HELP ddprun_healthy 1 while every rank of this node made progress within the hang timeout (GET /healthz 200), else 0.\n"
      "# TYPE ddprun_healthy gauge\n"
      "ddprun_healthy 1\n"
      "# HELP ddprun_hangs_total Hangs this node found (--hang_timeout, torchelastic timers): one a round, however many ranks hung.\n"
      "# TYPE ddprun_hangs_total counter\n"
      "ddprun_hangs_total 1\n"
      "# HELP ddprun_worker_failures_total Failures of this node's workers, by kind.\n"
      "# TYPE ddprun_worker_failures_total counter\n"
      "ddprun_worker_failures_total{kind=\"exit_code\"} 1\n"
      "ddprun_worker_failures_total{kind=\"hang\"} 1\n"
      "ddprun_worker_failures_total{kind=\"signal\"} 0\n"
      "# HELP ddprun_nodes Nodes in the job this round (GROUP_WORLD_SIZE).\n"
      "# TYPE ddprun_nodes gauge\n"
      "ddprun_nodes 2\n"
      "# HELP ddprun_node_rank This node's rank in the job this round (GROUP_RANK).\n"
      "# TYPE ddprun_node_rank gauge\n"
      "ddprun_node_rank 1\n"
      "# HELP ddprun_world_size Workers in the job this round (WORLD_SIZE).\n"
      "# TYPE ddprun_world_size gauge\n"
      "ddprun_world_size 4\n"
      "# HELP ddprun_hang_timeout_seconds The hang timeout in force (--hang_timeout, or what auto learned).\n"
      "# TYPE ddprun_hang_timeout_seconds gauge\n"
      "ddprun_hang_timeout_seconds 30\n"
      "# HELP ddprun_rank_steps_total The rank's last step (its progress record, the worker library, or a --progress_pattern).\n"
      "# TYPE ddprun_rank_steps_total counter\n"
      "ddprun_rank_steps_total{rank=\"2\",local_rank=\"0\"} 1200\n"
      "# HELP ddprun_rank_last_progress_age_seconds Seconds since the rank last made progress (a beat).\n"
      "# TYPE ddprun_rank_last_progress_age_seconds gauge\n"
      "ddprun_rank_last_progress_age_seconds{rank=\"2\",local_rank=\"0\"} 2.75\n";
  CHECK(metrics_text(view, 12.25) == expected);
}

TEST_CASE("families without samples are left out, and health follows /healthz") {
  struct Row {
    const char* what;
    double now;
    bool has_round;
    const char* present;
    const char* absent;
  };
  JobView view;
  RankView rank;
  rank.pid = 100;
  rank.running = true;
  rank.deadline = 5.0;
  view.ranks = {rank};
  view.hang_timeout = 5;
  const std::vector<Row> table = {
      {"no step: no steps family", 1, false, "\nddprun_workers_running 1\n", " ddprun_rank_steps_total "},
      {"no beat: no age family", 1, false, "\nddprun_healthy 1\n", " ddprun_rank_last_progress_age_seconds "},
      {"before the first round: no membership", 1, false, "\nddprun_restarts_total 0\n", " ddprun_nodes "},
      {"after the deadline: unhealthy", 6, false, "\nddprun_healthy 0\n", "\nddprun_healthy 1\n"},
      {"a round: membership", 1, true, "\nddprun_node_rank 0\n", " ddprun_rank_steps_total "},
  };
  for (const auto& row : table) {
    CAPTURE(std::string(row.what));
    JobView v = view;
    if (row.has_round) {
      v.nodes = 1;
      v.node_rank = 0;
    }
    const std::string text = metrics_text(v, row.now);
    CHECK(text.find(row.present) != std::string::npos);
    CHECK(text.find(row.absent) == std::string::npos);
    CHECK(text.back() == '\n');
  }
}

TEST_CASE("GET /metrics answers in the text format's media type") {
  JobView view;
  const std::string response = http_response("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", view, 0);
  CHECK(response.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(response.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(response.find("\r\n\r\n# HELP ddprun_info ") != std::string::npos);
}

TEST_CASE("the goodput ledger's families: as of the scrape, a figure not known yet left out") {
  JobView view;
  const std::string none = metrics_text(view, 1);
  CHECK(none.find("ddprun_goodput_") == std::string::npos);  // no ledger in the view

  GoodputLedger ledger(100, true);
  ledger.workers_started(100, 1);
  view.goodput = ledger;
  const std::string starting = metrics_text(view, 103);
  CHECK(starting.find("ddprun_goodput_ratio") == std::string::npos);
  CHECK(starting.find("ddprun_goodput_time_to_start_seconds") == std::string::npos);
  CHECK(starting.find("\nddprun_goodput_seconds_total{state=\"starting\"} 3\n") != std::string::npos);
  CHECK(starting.find("# TYPE ddprun_goodput_seconds_total counter\n") != std::string::npos);

  ledger.progress(102, 0);
  ledger.committed(104);
  ledger.failure(106, "segfault");
  ledger.workers_started(107, 1);
  ledger.progress(108, 0);
  view.goodput = ledger;
  const std::string text = metrics_text(view, 110);
  CHECK(text.find("\nddprun_goodput_time_to_start_seconds 2\n") != std::string::npos);
  CHECK(text.find("\nddprun_goodput_seconds_total{state=\"training\"} 6\n") != std::string::npos);
  CHECK(text.find("\nddprun_goodput_failures_injected_total 0\n") != std::string::npos);
  CHECK(text.find("\nddprun_goodput_seconds_total{state=\"recovering\"} 2\n") != std::string::npos);
  CHECK(text.find("\nddprun_goodput_work_redone_seconds_total 2\n") != std::string::npos);
  CHECK(text.find("\nddprun_goodput_failures_total{kind=\"segfault\"} 1\n") != std::string::npos);
  CHECK(text.find("\nddprun_goodput_last_time_to_recover_seconds 2\n") != std::string::npos);
  CHECK(text.find("\nddprun_goodput_ratio 0.4\n") != std::string::npos);  // (6 - 2) / 10
}
