#!/usr/bin/env bash
# The restart policy with real processes: a SyntaxError is not restarted whatever --max_restarts
# says (unless --restart_on=any); a transient failure is restarted and the job succeeds; a crash
# loop of a C++ program that exits 1 at once backs off 1, 2, 4, 8 s and stops at its 5th failure;
# --restart_window in real time. Each decision is in the event log with its reason.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

PY=/usr/bin/python3
export PYTHON_EXEC=$PY
count() { grep -c "\"event\":\"$2\"" "$1" || true; }

# 1. The issue's own: a SyntaxError with --max_restarts=100 ends after one attempt, at once.
printf 'def f(:\n' > "$T/broken_syntax.py"
start=$(date +%s.%N)
run_ddprun syntax --max_restarts=100 --event_log="$T/syntax.jsonl" --result_file="$T/syntax.json" "$T/broken_syntax.py"
took=$($PY -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$start" "$(date +%s.%N)")
expect_eq "$RC" 1 "SyntaxError exit code"
expect_in "$T/syntax.err" "^ddprun: not restarting: rank 0 on .*: syntax_error \(SyntaxError: invalid syntax\): running the same code again cannot fix a syntax_error; --restart_on=any restarts it anyway$"
expect_eq "$(count "$T/syntax.jsonl" worker_started)" 1 "one attempt"
expect_eq "$(events "$T/syntax.jsonl" restart decision)" stop "the decision in the event log"
events "$T/syntax.jsonl" restart reason | grep -q "^not restarting: rank 0" || fail "no reason in the event log"
expect_eq "$(json_field "$T/syntax.json" '["retryable"]')" False "not retryable"
# Under 2 s from ddprun's start to its exit, Python's start-up included (timed on a loaded machine:
# the decision itself takes milliseconds, the rest is two processes starting).
within 0 2 "$took" || fail "a SyntaxError took $took s to end the job"
ok "SyntaxError with --max_restarts=100: one attempt, 'not restarting', ${took} s"

# 2. --restart_on=any restarts it anyway (and the crash-loop breaker still counts).
run_ddprun any --max_restarts=1 --restart_on=any --restart_backoff_max=0 --event_log="$T/any.jsonl" "$T/broken_syntax.py"
expect_eq "$RC" 1 "still failing"
expect_eq "$(count "$T/any.jsonl" worker_started)" 2 "restarted once"
expect_in "$T/any.err" "^ddprun: not restarting: the 1 restarts of --max_restarts are spent$"
ok "--restart_on=any"

# 2b. The same Python exception at the same place twice in a row, with no progress between: the
# second is not restarted.
printf 'config = {}\nprint(config["lr"])\n' > "$T/same.py"
run_ddprun same --max_restarts=5 --event_log="$T/same.jsonl" "$T/same.py"
expect_eq "$RC" 1 "KeyError exit code"
expect_eq "$(count "$T/same.jsonl" worker_started)" 2 "restarted once"
expect_in "$T/same.err" "^ddprun: not restarting: rank 0 on .*: python_exception \\(KeyError: 'lr'\\): the same KeyError at $T/same.py:2 twice in a row with no progress in between; --restart_on=any restarts it anyway$"
ok "the same exception twice: not restarted a second time"

# 3. A transient failure: the 1st and 2nd attempts exit 1 at once, the 3rd succeeds.
worker transient <<'SH'
#!/bin/sh
[ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ] && exit 1
exit 0
SH
run_ddprun transient --max_restarts=5 --event_log="$T/transient.jsonl" --result_file="$T/transient.json" "$T/transient"
expect_eq "$RC" 0 "the 3rd attempt succeeds"
expect_eq "$(count "$T/transient.jsonl" worker_started)" 3 "three attempts"
expect_eq "$(events "$T/transient.jsonl" restart backoff | tr '\n' ' ')" "1.0 2.0 " "backoff 1 s, then 2 s"
expect_in "$T/transient.err" "restarting workers \(restart 2 of 5\): after rank 0 on .*: exit_code; no progress since the start \(2 in a row, the crash loop ends at 5\), waited 2 s"
expect_eq "$(json_field "$T/transient.json" '["exit_code"]') $(json_field "$T/transient.json" '["restarts"]')" "0 2" "result file after a success"
ok "a transient failure is restarted with backoff and the job succeeds"

# 4. A crash loop of a C++ program that exits 1 at once: 5 attempts, backoff between them, then
# "crash loop". The event log's times show the waits.
CXX=${CXX:-c++}
printf 'int main() { return 1; }\n' > "$T/exit1.cpp"
"$CXX" -o "$T/exit1" "$T/exit1.cpp" || fail "cannot compile with $CXX"
run_ddprun loop --max_restarts=100 --event_log="$T/loop.jsonl" --result_file="$T/loop.json" "$T/exit1"
expect_eq "$RC" 1 "crash loop exit code"
expect_eq "$(count "$T/loop.jsonl" worker_started)" 5 "five attempts"
expect_in "$T/loop.err" "^ddprun: crash loop: 5 failures in a row with no progress since their start \(last: rank 0 on .*: exit_code\); fix the cause, or raise --crash_loop_limit \(0: never stop\)$"
expect_eq "$(events "$T/loop.jsonl" restart backoff | tr '\n' ' ')" "1.0 2.0 4.0 8.0 None " "backoffs, then the stop"
expect_eq "$(json_field "$T/loop.json" '["retryable"]')" False "a crash loop is not worth a requeue"
# Each attempt starts at least its backoff after the previous one ended.
$PY - "$T/loop.jsonl" <<'PY' || fail "backoff not visible in the event log's times"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
exited = [e["time"] for e in events if e["event"] == "worker_exited"]
started = [e["time"] for e in events if e["event"] == "worker_started"]
gaps = [round(s - x, 2) for x, s in zip(exited, started[1:])]
print("gaps between a failure and the next start:", gaps)
sys.exit(not all(g >= b - 0.05 for g, b in zip(gaps, [1, 2, 4, 8])))
PY
ok "crash loop of a C++ program: 5 attempts, backoff 1 2 4 8 s, then 'crash loop'"

# 5. --restart_window in real time: the 1st attempt fails at once, the 2nd after 3 s, the 3rd
# succeeds. With --max_restarts=1 and a 2 s window the first restart is out of the window when
# the 2nd failure comes; without the window the budget is spent.
worker late <<'SH'
#!/bin/sh
case "$TORCHELASTIC_RESTART_COUNT" in
  0) exit 1 ;;
  1) sleep 3; exit 1 ;;
esac
exit 0
SH
run_ddprun window --max_restarts=1 --restart_window=2 --event_log="$T/window.jsonl" "$T/late"
expect_eq "$RC" 0 "restarts outside the window do not count"
expect_eq "$(count "$T/window.jsonl" worker_started)" 3 "three attempts"
expect_in "$T/window.err" "restarting workers \(restart 1 of 1 within 2 s\): after rank 0"
run_ddprun nowindow --max_restarts=1 --event_log="$T/nowindow.jsonl" "$T/late"
expect_eq "$RC" 1 "without the window the budget is spent"
expect_in "$T/nowindow.err" "^ddprun: not restarting: the 1 restarts of --max_restarts are spent$"
ok "--restart_window=2 with real time"

# 6. Workers SIGKILLed from outside (an operator, a scheduler, a chaos test), three times: each
# is of kind `killed` (not `host_oom`: the kernel saw no OOM kill), restarted at once, and no
# crash loop, whether it lands before the workers' first progress (still starting, as while they
# import torch) or after it. With a cgroup, its memory.events tells; without (DDPRUN_CGROUP=0),
# the kernel's own count in /proc/vmstat. --crash_loop_limit=2: two of the workers' own failures
# in a row would end the job.
cat >"$T/killme.py" <<'PY'
import os, sys, time
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 3:
    sys.exit(0)
if sys.argv[2] == "progress":
    for step in range(3):
        print(f"step {step}", flush=True)
with open(f"{sys.argv[1]}.{attempt}", "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
PY
started_at_least() { (( $(count "$1" worker_started) >= $2 )); }
for when in start progress; do
  for cgroup in 1 0; do
    name=killed-$when-$cgroup
    DDPRUN_CGROUP=$cgroup "$DDPRUN" --max_restarts=5 --crash_loop_limit=2 --progress_pattern='^step (?<step>[0-9]+)' \
      --event_log="$T/$name.jsonl" --result_file="$T/$name.json" "$T/killme.py" "$T/$name.pid" "$when" \
      >"$T/$name.out" 2>"$T/$name.err" &
    ddprun_pid=$!
    for attempt in 0 1 2; do
      # The step lines come before the pid file: ddprun reads what is left in a worker's pipes
      # before it judges its end.
      wait_for 60 test -s "$T/$name.pid.$attempt"
      kill -KILL "$(cat "$T/$name.pid.$attempt")"
      wait_for 60 started_at_least "$T/$name.jsonl" $((attempt + 2))
    done
    set +e
    wait "$ddprun_pid"
    RC=$?
    set -e
    [[ $RC == 0 ]] || { cat "$T/$name.err"; fail "$name: exit code $RC, expected 0 after three kills from outside"; }
    expect_eq "$(events "$T/$name.jsonl" worker_failed kind | tr '\n' ' ')" "killed killed killed " "$name: the kinds"
    expect_eq "$(events "$T/$name.jsonl" restart backoff | tr '\n' ' ')" "0.0 0.0 0.0 " "$name: no backoff"
    expect_not_in "$T/$name.err" "crash loop|no progress since the start|host_oom"
    if [[ $cgroup == 0 ]]; then
      expect_in "$T/$name.err" "not the out-of-memory killer: the kernel counted no OOM kill during the round"
    fi
  done
done
ok "SIGKILL from outside before and after progress, with a cgroup and without: killed, no backoff, no crash loop"

no_leftovers || fail "processes left behind: $(leftovers)"
