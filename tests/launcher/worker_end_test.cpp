#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include "report/worker_end.hpp"

using namespace ddprun::launcher;

TEST_CASE("the verdict on a worker's end, as a table") {
  struct Row {
    const char* name;
    WorkerEnd end;
    EndVerdict verdict;
    int exit_code;
    bool signal_from_outside;
  };
  const int exited_1 = W_EXITCODE(1, 0);
  const int killed = W_EXITCODE(0, SIGKILL);
  const int terminated = W_EXITCODE(0, SIGTERM);
  const int segv = W_EXITCODE(0, SIGSEGV);
  const Row rows[] = {
      {"exit 0", {W_EXITCODE(0, 0), 0, false, false, false}, EndVerdict::kSucceeded, 0, false},
      {"exit 0 after our SIGTERM", {W_EXITCODE(0, 0), SIGTERM, false, false, false}, EndVerdict::kSucceeded, 0, false},
      {"exit 1 on its own", {exited_1, 0, false, false, false}, EndVerdict::kFailed, 1, false},
      {"exit 1 after our SIGTERM", {exited_1, SIGTERM, false, false, false}, EndVerdict::kStoppedByDdprun, 1, false},
      {"exit 1 after our SIGTERM, with an error file", {exited_1, SIGTERM, false, true, false}, EndVerdict::kFailed, 1, false},
      {"exit 1 after our SIGTERM, its own exception", {exited_1, SIGTERM, false, false, true}, EndVerdict::kFailed, 1, false},
      {"killed by our SIGTERM", {terminated, SIGTERM, false, false, false}, EndVerdict::kStoppedByDdprun, 143, false},
      {"killed by our SIGKILL", {killed, SIGTERM, true, false, false}, EndVerdict::kStoppedByDdprun, 137, false},
      {"killed by our SIGTERM, its own exception does not count", {terminated, SIGTERM, false, false, true},
       EndVerdict::kStoppedByDdprun, 143, false},
      {"SIGKILL from outside", {killed, 0, false, false, false}, EndVerdict::kFailed, 137, true},
      {"SIGKILL from outside while we sent SIGTERM", {killed, SIGTERM, false, false, false}, EndVerdict::kFailed, 137, true},
      {"SIGSEGV while stopping", {segv, SIGTERM, false, false, false}, EndVerdict::kFailed, 139, true},
      {"SIGTERM killed it, we sent SIGINT", {terminated, SIGINT, false, false, false}, EndVerdict::kFailed, 143, true},
      // The fence's backstop passed: a SIGKILL from outside is the orphan guard's fence.
      {"SIGKILL from outside past the fence's backstop", {killed, 0, false, false, false, true},
       EndVerdict::kFencedByGuard, 137, true},
      {"SIGKILL from outside past the backstop, while we sent SIGTERM", {killed, SIGTERM, false, false, false, true},
       EndVerdict::kFencedByGuard, 137, true},
      {"our own SIGKILL past the backstop is our stop", {killed, SIGTERM, true, false, false, true},
       EndVerdict::kStoppedByDdprun, 137, false},
      {"SIGSEGV past the backstop is a failure", {segv, 0, false, false, false, true}, EndVerdict::kFailed, 139, true},
      {"exit 1 past the backstop is a failure", {exited_1, 0, false, false, false, true}, EndVerdict::kFailed, 1, false},
      {"exit 0 past the backstop", {W_EXITCODE(0, 0), 0, false, false, false, true}, EndVerdict::kSucceeded, 0, false},
      // The dying gasp (--snapshot_signal): a worker with no handler for SIGUSR1 dies of it, which
      // is ddprun's doing, never a failure of its own; one that saves and exits is stopped too.
      {"killed by our gasp's SIGUSR1", {W_EXITCODE(0, SIGUSR1), 0, false, false, false, false, SIGUSR1},
       EndVerdict::kStoppedByDdprun, 128 + SIGUSR1, false},
      {"killed by our gasp's SIGUSR1 after our SIGTERM", {W_EXITCODE(0, SIGUSR1), SIGTERM, false, false, false, false, SIGUSR1},
       EndVerdict::kStoppedByDdprun, 128 + SIGUSR1, false},
      {"exit 1 after our gasp", {exited_1, 0, false, false, false, false, SIGUSR1}, EndVerdict::kStoppedByDdprun, 1, false},
      {"exit 0 after our gasp", {W_EXITCODE(0, 0), 0, false, false, false, false, SIGUSR1}, EndVerdict::kSucceeded, 0, false},
      {"exit 1 after our gasp, its own exception", {exited_1, 0, false, false, true, false, SIGUSR1},
       EndVerdict::kFailed, 1, false},
      {"SIGUSR1 from outside, no gasp sent", {W_EXITCODE(0, SIGUSR1), 0, false, false, false}, EndVerdict::kFailed,
       128 + SIGUSR1, true},
      {"SIGSEGV during our gasp", {segv, 0, false, false, false, false, SIGUSR1}, EndVerdict::kFailed, 139, true},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const WorkerEndVerdict v = judge_worker_end(row.end);
    CHECK(v.verdict == row.verdict);
    CHECK(v.exit_code == row.exit_code);
    CHECK(v.signal_from_outside == row.signal_from_outside);
    CHECK(v.signalled_by_ddprun == (row.end.sent_signal != 0 || row.end.sent_kill || row.end.sent_gasp != 0));
    CHECK(v.signal == (WIFSIGNALED(row.end.wait_status) ? WTERMSIG(row.end.wait_status) : 0));
  }
}

TEST_CASE("an exception of the worker's own, or the one ddprun's stop raised") {
  CHECK(raised_on_its_own({"Traceback (most recent call last):", "  File \"t.py\", line 3, in <module>",
                           "SyntaxError: invalid syntax"}));
  CHECK_FALSE(raised_on_its_own({"Traceback (most recent call last):", "  File \"t.py\", line 3, in <module>",
                                 "KeyboardInterrupt"}));
  CHECK_FALSE(raised_on_its_own({"Traceback (most recent call last):", "SystemExit: 1"}));
  const char* frame = "  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py\", line 62, in _terminate_process_handler";
  CHECK_FALSE(raised_on_its_own({"Traceback (most recent call last):", frame,
                                 "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15"}));
  CHECK(raised_on_its_own({"Traceback (most recent call last):", frame, "ValueError: bad batch"}));
  CHECK_FALSE(raised_on_its_own({"just a line"}));
  CHECK_FALSE(raised_on_its_own({}));
}
