// A hang turned into a worker failure, as tables: the failure's message and time, the console
// line, whose stacks are collected, and what the summary shows under "where:".
#include <doctest/doctest.h>

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "ddprun/exit_codes.hpp"
#include "hangs/hang_response.hpp"

using namespace ddprun;
using namespace ddprun::launcher;

namespace {

HungRank hung(int local_rank, double silent_for, bool ever_beat, double timeout) {
  HungRank h;
  h.local_rank = local_rank;
  h.silent_for = silent_for;
  h.ever_beat = ever_beat;
  h.timeout = timeout;
  return h;
}

elastic::WorkerFailure failure_of(int rank, int local_rank, int pid, std::string message = "") {
  elastic::WorkerFailure f;
  f.rank = rank;
  f.local_rank = local_rank;
  f.pid = pid;
  f.message = std::move(message);
  return f;
}

std::unique_ptr<WorkerProcess> worker(int rank, int local_rank, pid_t pid, bool alive, std::string stacks_file) {
  auto w = std::make_unique<WorkerProcess>();
  w->rank = rank;
  w->local_rank = local_rank;
  w->pid = pid;
  w->alive = alive;
  w->stacks_file = std::move(stacks_file);
  return w;
}

}  // namespace

HungRank with_step(HungRank h, long long step) {
  h.last_step = step;
  return h;
}

TEST_CASE("a hung rank's failure: its message, exit code 124, and the time of its last beat") {
  struct Row {
    HungRank hung;
    std::string why;
    std::string message;
  };
  const std::vector<Row> table = {
      {hung(0, 12.34, true, 10), "", "no progress for 12.3 s (hang timeout 10.0 s)"},
      {hung(1, 601, false, 600), "", "no heartbeat since it started 601.0 s ago (--hang_startup=600)"},
      {hung(0, 2.5, false, 0.5), "", "no heartbeat since it started 2.5 s ago (--hang_startup=0.5)"},
      {hung(0, 3, true, 10), "its torchelastic timer 'step' expired", "its torchelastic timer 'step' expired"},
      {with_step(hung(0, 6, true, 5), 12), "", "no progress for 6.0 s (hang timeout 5.0 s; last step 12)"},
  };
  for (const auto& row : table) {
    CAPTURE(row.message);
    elastic::WorkerFailure base = failure_of(3, row.hung.local_rank, 4242);
    base.host = "node7";
    const auto f = hung_failure(base, row.hung, row.why, 1000);
    CHECK(f.hung);
    CHECK(f.exit_code == exit_code::kHung);
    CHECK(f.message == row.message);
    CHECK(f.timestamp == doctest::Approx(1000 - row.hung.silent_for));
    CHECK(f.rank == 3);
    CHECK(f.host == "node7");
    CHECK(f.pid == 4242);
  }
}

TEST_CASE("an expired torchelastic timer is a rank silent since it expired") {
  const HungRank h = timer_hang(2, 990, 1000);
  CHECK(h.local_rank == 2);
  CHECK(h.silent_for == doctest::Approx(10));
  CHECK(h.ever_beat);
}

TEST_CASE("the console line names the hung ranks, the first message and how many stacks") {
  struct Row {
    std::vector<elastic::WorkerFailure> failures;
    std::size_t targets;
    std::string line;
  };
  const std::vector<Row> table = {
      {{failure_of(1, 1, 11, "no progress for 5.0 s (hang timeout 5.0 s)")}, 1,
       "ddprun: rank 1 hung: no progress for 5.0 s (hang timeout 5.0 s); collecting the stacks of 1 worker\n"},
      {{failure_of(0, 0, 10, "first"), failure_of(2, 2, 12, "second")}, 4,
       "ddprun: ranks 0, 2 hung: first; collecting the stacks of 4 workers\n"},
  };
  for (const auto& row : table) CHECK(hang_announcement(row.failures, row.targets) == row.line);
}

TEST_CASE("stacks are collected from the hung ranks first, then every other running worker with a file") {
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  workers.push_back(worker(4, 0, 100, true, "/s/rank_4"));
  workers.push_back(worker(5, 1, 101, true, "/s/rank_5"));
  workers.push_back(worker(6, 2, 102, false, "/s/rank_6"));  // ended: no stacks
  workers.push_back(worker(7, 3, 103, true, ""));            // no file: no stacks
  const auto targets = stack_targets({failure_of(5, 1, 101)}, workers);
  REQUIRE(targets.size() == 2);
  CHECK(targets[0].rank == 5);
  CHECK(targets[0].pid == 101);
  CHECK(targets[0].file == "/s/rank_5");
  CHECK(targets[1].rank == 4);
  CHECK(targets[1].file == "/s/rank_4");
}

TEST_CASE("the owner of an expired timer: a running worker, by pid") {
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  workers.push_back(worker(0, 0, ::getpid(), true, ""));
  CHECK(timer_owner(workers, ::getpid()) == workers[0].get());
  workers[0]->alive = false;
  CHECK(timer_owner(workers, ::getpid()) == nullptr);
}

TEST_CASE("where: the innermost frames, or why there are none; then where the stacks are kept") {
  const std::string stacks =
      "== eu-stack -p 77 ==\n"
      "PID 77 - process\n"
      "TID 77:\n"
      "#0  0x00007f0000000001 pselect\n"
      "#1  0x00007f0000000002 main\n";
  struct Row {
    std::string stacks;
    std::string missing;
    std::string logs_root;
    std::string where;
  };
  const std::vector<Row> table = {
      {stacks, "", "/logs",
       "stuck in (main thread, innermost first):\n  pselect\n  main\n"
       "stacks of every worker: /logs/attempt_2/rank_*/stacks.txt"},
      {stacks, "", "",
       "stuck in (main thread, innermost first):\n  pselect\n  main\n"
       "(run with --log_dir to keep the stacks of every worker)"},
      {"", "", "", "no stack collected\n(run with --log_dir to keep the stacks of every worker)"},
      {"", "no native stacks: gdb is missing", "/logs",
       "no stack collected: no native stacks: gdb is missing\n"
       "stacks of every worker: /logs/attempt_2/rank_*/stacks.txt"},
  };
  for (const auto& row : table) CHECK(where_stuck(row.stacks, 77, row.missing, row.logs_root, 2) == row.where);
}

TEST_CASE("the quiet warning names the rank, the silence and the last step when known") {
  CHECK(quiet_warning(5, {1, 600.4, 1200}) ==
        "ddprun: rank 5 made no progress for 600 s (last step 1200); with --hang_timeout off ddprun only warns, "
        "once (--hang_timeout=auto would stop the job and restart it)\n");
  CHECK(quiet_warning(0, {0, 601, std::nullopt}).rfind("ddprun: rank 0 made no progress for 601 s; with", 0) == 0);
}

TEST_CASE("a culprit's message: what the others wait in, then its own silence and last step") {
  HungRank beat{1, 10.26, true, 10, 40};
  CHECK(culprit_message("rank 0 waits in all_reduce #12; rank 1 has not entered it: last in all_reduce #11", beat) ==
        "rank 0 waits in all_reduce #12; rank 1 has not entered it: last in all_reduce #11; no progress for 10.3 s "
        "(hang timeout 10.0 s; last step 40)");
  beat.last_step.reset();
  CHECK(culprit_message("W", beat) == "W; no progress for 10.3 s (hang timeout 10.0 s)");
  const HungRank never{1, 13.04, false, 600, std::nullopt};
  CHECK(culprit_message("W", never) == "W; no progress since it started 13.0 s ago");
}
