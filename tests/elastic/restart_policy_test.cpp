// The restart policy as tables: each scenario is the job's failed rounds in order, with the
// decision each one must get. The clock is the test's: --restart_window with a fake clock.
#include "core/restart_policy.hpp"

#include <doctest/doctest.h>

#include "ddprun/failure_text.hpp"

#include <string>
#include <vector>

namespace ddprun::elastic {
namespace {

struct Round {
  double now;
  const char* kind;
  bool retryable;
  const char* exception;  // "Type@file:line" for a Python exception, else ""
  bool progressed;
  // expected
  bool restart;
  double backoff;
  const char* reason;  // a part of the reason
};

void play(int max_restarts, RestartSettings settings, const std::vector<Round>& rounds) {
  RestartPolicy policy(max_restarts, settings, 0, 0);
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    const Round& r = rounds[i];
    CAPTURE(i);
    WorkerFailure f;
    f.rank = 3;
    f.host = "node7";
    f.kind = *FailureKindName::parse(r.kind);
    f.retryable = r.retryable;
    f.cause = "the cause";
    const std::string exception = r.exception;
    if (!exception.empty()) {
      f.exception = exception.substr(0, exception.find('@'));
      f.location = exception.substr(exception.find('@') + 1);
    }
    const RestartDecision d = policy.decide(f, r.progressed, r.now);
    CHECK(d.restart == r.restart);
    CHECK(d.backoff == r.backoff);
    const std::string reason = d.restart ? describe_restart(d.why) : d.reason;
    CAPTURE(reason);
    CHECK(reason.find(r.reason) != std::string::npos);
  }
}

RestartSettings settings(double backoff_max = 60, int crash_loop_limit = 5, double window = 0, bool any = false) {
  RestartSettings s;
  s.backoff_max = backoff_max;
  s.crash_loop_limit = crash_loop_limit;
  s.window = window;
  s.restart_on_any = any;
  return s;
}

}  // namespace

TEST_CASE("what a restart cannot fix is not restarted, whatever --max_restarts says") {
  play(100, settings(), {
      {0, "syntax_error", false, "", false, false, 0,
       "not restarting: rank 3 on node7: syntax_error (the cause): running the same code again cannot fix a "
       "syntax_error; --restart_on=any restarts it anyway"},
  });
  play(100, settings(), {{0, "import_error", false, "", false, false, 0, "cannot fix a import_error"}});
  play(100, settings(), {{0, "config_error", false, "", true, false, 0, "cannot fix a config_error"}});  // a user rule
  // --restart_on=any: restarted, still with the crash-loop backoff.
  play(100, settings(60, 5, 0, true), {{0, "syntax_error", false, "", false, true, 1, "restart 1 of 100"}});
}

TEST_CASE("the same Python exception at the same place twice with no progress: not restarted") {
  play(100, settings(), {
      {0, "python_exception", true, "KeyError@train.py:12", false, true, 1, "restart 1 of 100 after rank 3"},
      {5, "python_exception", true, "KeyError@train.py:12", false, false, 0,
       "the same KeyError at train.py:12 twice in a row with no progress in between; --restart_on=any"},
  });
  play(100, settings(), {
      {0, "python_exception", true, "KeyError@train.py:12", false, true, 1, "restart 1"},
      // Elsewhere: not the same again, and a new crash-loop count (a backoff of 1 s again).
      {5, "python_exception", true, "KeyError@train.py:40", false, true, 1, "restart 2"},
      // Another type at that place: not the same again, but the same kind and place (2 in a row).
      {9, "python_exception", true, "ValueError@train.py:40", false, true, 2, "restart 3"},
      {20, "python_exception", true, "ValueError@train.py:40", true, true, 0, "restart 4"},  // progress between
      // Progress in the round before does not count: none came between these two failures.
      {30, "python_exception", true, "ValueError@train.py:40", false, false, 0, "the same ValueError at train.py:40 twice"},
  });
  play(100, settings(60, 5, 0, true), {
      {0, "python_exception", true, "KeyError@a.py:1", false, true, 1, "restart 1"},
      {5, "python_exception", true, "KeyError@a.py:1", false, true, 2, "restart 2"},
  });
}

TEST_CASE("a crash loop backs off 1, 2, 4 ... s and stops after --crash_loop_limit failures in a row") {
  play(100, settings(), {
      {0, "exit_code", true, "", false, true, 1, "restart 1 of 100 after rank 3 on node7: exit_code (the cause); no "
                                                 "progress since the start (1 in a row, the crash loop ends at 5), "
                                                 "waited 1 s"},
      {2, "exit_code", true, "", false, true, 2, "(2 in a row"},
      {5, "exit_code", true, "", false, true, 4, "(3 in a row"},
      {10, "exit_code", true, "", false, true, 8, "(4 in a row"},
      {19, "exit_code", true, "", false, false, 0,
       "crash loop: 5 failures in a row with no progress since their start (last: rank 3 on node7: exit_code (the "
       "cause)); fix the cause, or raise --crash_loop_limit (0: never stop)"},
  });
  // Progress resets the count and waits nothing; the backoff is capped.
  play(100, settings(3, 0), {
      {0, "segfault", true, "", false, true, 1, "restart 1"},
      {1, "segfault", true, "", false, true, 2, "restart 2"},
      {3, "segfault", true, "", false, true, 3, "restart 3"},
      {9, "segfault", true, "", false, true, 3, "(4 in a row), waited 3 s"},  // 0: no crash-loop end
      {20, "nccl_error", true, "", true, true, 0, "restart 5 of 100 after rank 3 on node7: nccl_error (the cause)"},
      {21, "segfault", true, "", false, true, 1, "(1 in a row"},
  });
  play(100, settings(0, 2), {
      {0, "abort", true, "", false, true, 0, "restart 1"},  // --restart_backoff_max=0: no wait
      {1, "abort", true, "", false, false, 0, "crash loop: 2 failures"},
  });
}

TEST_CASE("the crash-loop breaker counts what a restart repeats; a kill from outside counts nothing") {
  // Kills from outside (kind killed: an operator, a scheduler) while the workers still start:
  // restarted at once, no backoff, no count; the workers' own failures count around them.
  play(100, settings(60, 3), {
      {0, "killed", true, "", false, true, 0, "restart 1 of 100 after rank 3 on node7: killed (the cause)"},
      {1, "killed", true, "", false, true, 0, "restart 2 of 100"},
      {2, "exit_code", true, "", false, true, 1, "(1 in a row, the crash loop ends at 3), waited 1 s"},
      {3, "killed", true, "", false, true, 0, "restart 4 of 100"},
      {4, "exit_code", true, "", false, true, 2, "(2 in a row"},
      {5, "killed", true, "", false, true, 0, "restart 6 of 100"},
      {6, "exit_code", true, "", false, false, 0, "crash loop: 3 failures in a row"},
  });
  // However many, kills from outside never make a crash loop.
  play(100, settings(60, 2), {
      {0, "killed", true, "", false, true, 0, "restart 1"},
      {1, "killed", true, "", false, true, 0, "restart 2"},
      {2, "killed", true, "", false, true, 0, "restart 3"},
      {3, "killed", true, "", false, true, 0, "restart 4"},
  });
  // Another kind, or the same kind at another place, starts a new count.
  play(100, settings(60, 3), {
      {0, "segfault", true, "", false, true, 1, "(1 in a row"},
      {1, "segfault", true, "", false, true, 2, "(2 in a row"},
      {2, "abort", true, "", false, true, 1, "(1 in a row"},
      {3, "python_exception", true, "KeyError@a.py:3", false, true, 1, "(1 in a row"},
      {4, "python_exception", true, "ValueError@a.py:9", false, true, 1, "(1 in a row"},
      {5, "python_exception", true, "TypeError@a.py:9", false, true, 2, "(2 in a row"},
  });
  // A kill from outside between the same exception twice is no progress: still the same again.
  play(100, settings(60, 0), {
      {0, "python_exception", true, "KeyError@a.py:3", false, true, 1, "restart 1"},
      {1, "killed", true, "", false, true, 0, "restart 2"},
      {2, "python_exception", true, "KeyError@a.py:3", false, false, 0, "the same KeyError at a.py:3 twice in a row"},
  });
}

TEST_CASE("--max_restarts is spent first; with --restart_window only recent restarts count") {
  play(0, settings(), {{0, "syntax_error", false, "", false, false, 0, ""}});  // the default: no line of its own
  play(2, settings(60, 0), {
      {0, "exit_code", true, "", true, true, 0, "restart 1 of 2"},
      {10, "exit_code", true, "", true, true, 0, "restart 2 of 2"},
      {20, "exit_code", true, "", true, false, 0, "not restarting: the 2 restarts of --max_restarts are spent"},
  });
  // A job that fails once a day survives with --max_restarts=3 --restart_window=86400.
  const double day = 86400;
  play(3, settings(60, 0, day), {
      {0.5 * day, "nccl_error", true, "", true, true, 0, "restart 1 of 3 within 86400 s"},
      {1.5 * day, "nccl_error", true, "", true, true, 0, "restart 1 of 3 within 86400 s"},  // the first is out
      {2.5 * day, "nccl_error", true, "", true, true, 0, "restart 1 of 3"},
      {2.6 * day, "nccl_error", true, "", true, true, 0, "restart 2 of 3"},
      {2.7 * day, "nccl_error", true, "", true, true, 0, "restart 3 of 3"},
      {2.8 * day, "nccl_error", true, "", true, false, 0,
       "not restarting: the 3 restarts of --max_restarts within --restart_window=86400 s are spent"},
  });
  // Without the window the same job ends at its 4th failure.
  play(3, settings(60, 0), {
      {0.5 * day, "nccl_error", true, "", true, true, 0, "restart 1 of 3"},
      {1.5 * day, "nccl_error", true, "", true, true, 0, "restart 2 of 3"},
      {2.5 * day, "nccl_error", true, "", true, true, 0, "restart 3 of 3"},
      {3.5 * day, "nccl_error", true, "", true, false, 0, "are spent"},
  });
}

TEST_CASE("restarts an earlier coordinator made count, at the time it took over") {
  RestartPolicy policy(2, settings(60, 0, 100), 2, 50);
  CHECK(policy.restarts_counted(50) == 2);
  CHECK(policy.restarts_counted(151) == 0);
}

TEST_CASE("a policy restored from another's history decides as that one would (a new etcd leader)") {
  WorkerFailure f;
  f.kind = FailureKind::kPythonException;
  f.exception = "ValueError";
  f.location = "a.py:3";
  RestartPolicy first(5, settings(0, 60, 100), 0, 0);
  CHECK(first.decide(f, false, 10).restart);
  CHECK(first.decide(f, true, 20).restart);
  RestartPolicy::History h = first.history();
  CHECK(h.restarts == std::vector<double>{10, 20});
  CHECK(h.no_progress == 0);
  CHECK(h.last_exception == "ValueError at a.py:3");
  RestartPolicy second(5, settings(0, 60, 100), 2, 30);
  second.restore(h);
  // The window (100 s) counts the restarts at their own times, not at the take-over.
  CHECK(second.restarts_counted(115) == 1);
  // The same exception again with no progress: what the first policy would say.
  const RestartDecision d = second.decide(f, false, 40);
  CHECK_FALSE(d.restart);
  CHECK(d.reason.find("the same ValueError at a.py:3 twice in a row") != std::string::npos);
}

}  // namespace ddprun::elastic
