#include <doctest/doctest.h>

#include <signal.h>

#include "report/event_records.hpp"

using namespace ddprun;
using namespace ddprun::launcher;
using nlohmann::json;

// The records are public API (the manual's event log reference): each one's name and fields.
TEST_CASE("event log records, as a table") {
  config::LaunchConfig config;
  config.nproc_per_node = 4;
  config.min_nodes = 1;
  config.max_nodes = 2;
  config.max_restarts = 3;
  config.program = "train.py";
  elastic::RoundAssignment round;
  round.round = 2;
  round.restart_count = 1;
  round.group_world_size = 2;
  round.world_size = 8;
  round.master_addr = "10.0.0.1";
  round.master_port = 29500;
  elastic::WorkerFailure f;
  f.rank = 5;
  f.local_rank = 1;
  f.exit_code = 139;
  f.kind = FailureKind::kSegfault;
  f.cause = "SIGSEGV";
  f.step = 40;
  f.progressed = true;
  elastic::JobOutcome outcome;
  outcome.exit_code = 139;
  outcome.failures = {f};
  outcome.stop_reason = "crash loop: ...";
  outcome.quarantined = {{"h2 (10.0.0.2)", "2 segfaults"}};

  struct Row {
    EventRecord record;
    const char* event;
    json fields;
  };
  const Row rows[] = {
      {records::started(config), "started",
       {{"nproc_per_node", 4}, {"nnodes", "1:2"}, {"max_restarts", 3}, {"chaos", "off"}, {"program", "train.py"}}},
      {records::chaos_fault("hang", 5, 1, 1234, 4.5, 4.75), "chaos_fault",
       {{"kind", "hang"}, {"rank", 5}, {"local_rank", 1}, {"pid", 1234}, {"due", 4.5}, {"at", 4.75}, {"injected", true}}},
      {records::round_started(round), "round_started",
       {{"round", 2}, {"restart_count", 1}, {"group_world_size", 2}, {"world_size", 8},
        {"master_addr", "10.0.0.1"}, {"master_port", 29500}}},
      {records::restart_stopped("crash loop: ...", 2), "restart",
       {{"decision", "stop"}, {"reason", "crash loop: ..."}, {"restart_count", 2}}},
      {records::stop_requested(2, "rank 3 failed"), "stop_requested", {{"round", 2}, {"why", "rank 3 failed"}}},
      {records::worker_started(5, 1, 1234), "worker_started", {{"rank", 5}, {"local_rank", 1}, {"pid", 1234}}},
      {records::worker_exited(5, 1, 1234, 143, SIGTERM, true), "worker_exited",
       {{"rank", 5}, {"local_rank", 1}, {"pid", 1234}, {"exit_code", 143}, {"signal", "SIGTERM"},
        {"stopped_by_ddprun", true}}},
      {records::worker_exited(5, 1, 1234, 1, 0, false), "worker_exited",
       {{"rank", 5}, {"local_rank", 1}, {"pid", 1234}, {"exit_code", 1}, {"signal", nullptr},
        {"stopped_by_ddprun", false}}},
      {records::worker_failed(f), "worker_failed",
       {{"rank", 5}, {"local_rank", 1}, {"exit_code", 139}, {"kind", "segfault"}, {"retryable", true},
        {"cause", "SIGSEGV"}, {"exception", nullptr}, {"location", nullptr}, {"step", 40}, {"progressed", true}}},
      {records::round_ended(2), "round_ended", {{"round", 2}}},
      {records::snapshots_removed(2, {{"ckpt.pt", "closed as rank 1 ended"}}), "snapshots_removed",
       {{"round", 2}, {"files", {{{"path", "ckpt.pt"}, {"why", "closed as rank 1 ended"}}}}}},
      {records::spare(1, "the job has its 2 nodes"), "spare", {{"place", 1}, {"why", "the job has its 2 nodes"}}},
      {records::quarantined({"h2 (10.0.0.2)", "2 segfaults"}), "quarantined",
       {{"node", "h2 (10.0.0.2)"}, {"why", "2 segfaults"}}},
      {records::signal_received(SIGTERM), "signal_received", {{"signal", "SIGTERM"}}},
      {records::signal_forwarded(SIGUSR1, false), "signal_received", {{"signal", "SIGUSR1"}, {"forwarded", false}}},
      {records::quiet(5, 1, 12.5, std::nullopt), "quiet",
       {{"rank", 5}, {"local_rank", 1}, {"silent_for", 12.5}, {"last_step", nullptr}}},
      {records::progress(5, 1, 40, 12), "progress", {{"rank", 5}, {"local_rank", 1}, {"step", 40}, {"beats", 12}}},
      {records::progress(5, 1, std::nullopt, 3), "progress",
       {{"rank", 5}, {"local_rank", 1}, {"step", nullptr}, {"beats", 3}}},
      {records::hang_timeout_learned(30), "hang_timeout_learned", {{"hang_timeout", 30.0}}},
      {records::heartbeats_missing(60), "heartbeats_missing", {{"after", 60.0}}},
      {records::hang(5, 1, 1234, 12.5, 10, 40, "no progress"), "hang",
       {{"rank", 5}, {"local_rank", 1}, {"pid", 1234}, {"silent_for", 12.5}, {"hang_timeout", 10.0},
        {"last_step", 40}, {"why", "no progress"}}},
      {records::timer_expired(1234, "step", SIGKILL), "timer_expired",
       {{"pid", 1234}, {"scope_id", "step"}, {"signal", SIGKILL}}},
      {records::stacks_written(5, 1234, "/logs/attempt_0/5/stacks"), "stacks_written",
       {{"rank", 5}, {"pid", 1234}, {"file", "/logs/attempt_0/5/stacks"}}},
      {records::stacks_written(5, 1234, ""), "stacks_written", {{"rank", 5}, {"pid", 1234}, {"file", nullptr}}},
      {records::dying_gasp(SIGUSR1, {0, 2}, 2, 1258291, 0.75, 5.0, "grace", 1), "dying_gasp",
       {{"signal", "SIGUSR1"}, {"ranks", {0, 2}}, {"files", 2}, {"bytes", 1258291}, {"last_write", 0.75},
        {"seconds", 5.0}, {"ended", "grace"}, {"still_running", 1}}},
      {records::dying_gasp(SIGUSR2, {1}, 0, 0, std::nullopt, 0.25, "workers_ended", 0), "dying_gasp",
       {{"signal", "SIGUSR2"}, {"ranks", {1}}, {"files", 0}, {"bytes", 0}, {"last_write", nullptr},
        {"seconds", 0.25}, {"ended", "workers_ended"}, {"still_running", 0}}},
      {records::exit(elastic::JobOutcome{}, 143, SIGTERM), "exit", {{"exit_code", 143}, {"signal", "SIGTERM"}}},
      {records::exit(elastic::JobOutcome{}, 143, SIGTERM, "/dev/shm/ddprun-snapshots.0.j"), "exit",
       {{"exit_code", 143}, {"signal", "SIGTERM"}, {"snapshot_dir", "/dev/shm/ddprun-snapshots.0.j"}}},
      {records::exit(outcome, 139, 0), "exit",
       {{"exit_code", 139},
        {"root_cause", {{"rank", 5}, {"host", ""}, {"exit_code", 139}, {"hung", false}, {"kind", "segfault"},
                        {"retryable", true}, {"cause", "SIGSEGV"}, {"step", 40}}},
        {"stop_reason", "crash loop: ..."},
        {"quarantined", json::array({{{"node", "h2 (10.0.0.2)"}, {"why", "2 segfaults"}}})}}},
  };
  for (const Row& row : rows) {
    CAPTURE(row.event);
    CHECK(row.record.event == row.event);
    CHECK(row.record.fields.dump() == row.fields.dump());
  }
  const EventRecord restart = records::restart(round, 3);
  CHECK(restart.event == "restart");
  CHECK(restart.fields.at("decision") == "restart");
  CHECK(restart.fields.at("max_restarts") == 3);
}
