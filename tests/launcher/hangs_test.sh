#!/usr/bin/env bash
# Hang detection with real workers (sh scripts that touch DDPRUN_HEARTBEAT_FILE): a rank that
# stops beating is found within the timeout, its stacks are written, the group is stopped and
# restarted or ddprun exits 124; --hang_timeout=auto; the event log; the status server; two nodes.
# Each worker writes the time of its last beat, so detection time is checked against it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

# beater: beats every 0.1 s; rank $HANG_RANK (on attempt 0 only) stops after 5 beats in a
# function the native stack shows as sleep's. The other ranks run until ddprun stops them or
# $T/stop exists; after a restart, they all end after $STEPS beats.
worker beater <<'SH'
#!/bin/bash
beat() { touch "$DDPRUN_HEARTBEAT_FILE"; date +%s.%N > "$T/lastbeat.$RANK"; }
n=0
while [ ! -e "$T/stop" ]; do
  beat; n=$((n + 1))
  if [ "$RANK" = "${HANG_RANK:--1}" ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ $n -ge 5 ]; then
    exec -a "stuck $T" sleep 1000
  fi
  [ -n "${STEPS:-}" ] && [ "$TORCHELASTIC_RESTART_COUNT" != 0 ] && [ $n -ge "$STEPS" ] && exit 0
  sleep 0.1
done
SH
export T


# 1. Fixed timeout: rank 1 goes silent; found after 2 s, stacks of both ranks, exit 124.
HANG_RANK=1 run_ddprun fixed --nproc_per_node=2 --hang_timeout=2 --log_dir="$T/logs" --event_log="$T/fixed.jsonl" "$T/beater"
expect_eq "$RC" 124 "exit code of a hung job"
expect_in "$T/fixed.err" "rank 1 hung: no progress for 2\.[0-9] s \(hang timeout 2\.0 s\); collecting the stacks of 2 workers"
expect_in "$T/fixed.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\): hang \(no progress for 2\.[0-9] s"
expect_in "$T/fixed.err" "^    where:"
run=$(run_dir "$T/logs")
expect_in "$T/fixed.err" "stacks of every worker: $run/attempt_0/rank_\*/stacks.txt"
for r in 0 1; do
  expect_in "$run/attempt_0/rank_$r/stacks.txt" "^== (eu-stack|gdb)"
  expect_in "$run/attempt_0/rank_$r/stacks.txt" "(main|_start|__libc_start)"
done
delay=$(hang_delay "$T/fixed.jsonl" 1 "$T/lastbeat.1")
within 1.9 6 "$delay" || fail "rank 1 found hung ${delay}s after its last beat, with a 2 s timeout"
for e in started round_started worker_started hang stacks_written worker_exited exit; do
  expect_in "$T/fixed.jsonl" "\"event\":\"$e\""
done
expect_in "$T/fixed.jsonl" '"event":"exit".*"exit_code":124.*"root_cause":\{"cause":"no progress for [^"]+","exit_code":124,"host":"[^"]+","hung":true,"kind":"hang","rank":1,"retryable":true,"step":null\}'
python3 -c "
import json, sys
for line in open('$T/fixed.jsonl'):
    e = json.loads(line)
    assert {'time', 'event', 'node', 'group_rank', 'attempt'} <= e.keys(), e
" || fail "an event log line lacks time, event, node, group_rank or attempt"
wait_for 10 no_leftovers
ok "fixed timeout: rank 1 found hung ${delay} s after its last beat (timeout 2 s), stacks, exit 124, event log"

# 2. The hang is a failure like any other: restarted while restarts remain.
rm -f "$T"/lastbeat.*
HANG_RANK=0 STEPS=10 run_ddprun restart --nproc_per_node=2 --hang_timeout=2 --max_restarts=1 --event_log="$T/restart.jsonl" "$T/beater"
expect_eq "$RC" 0 "exit code after a hang and a successful restart"
expect_in "$T/restart.err" "rank 0 hung"
expect_in "$T/restart.err" "restarting workers \(restart 1 of 1\)"
expect_in "$T/restart.jsonl" '"event":"restart"'
wait_for 10 no_leftovers
ok "a hang restarts the group while restarts remain"

# 3. auto: rank 1 never beats while rank 0 does: hung after the start-up allowance.
worker silent_one <<'SH'
#!/bin/bash
if [ "$RANK" = 1 ]; then exec -a "stuck $T" sleep 1000; fi
while true; do touch "$DDPRUN_HEARTBEAT_FILE"; sleep 0.1; done
SH
run_ddprun auto --nproc_per_node=2 --hang_timeout=auto:2 --hang_startup=3 "$T/silent_one"
expect_eq "$RC" 124 "exit code, auto"
expect_in "$T/auto.err" "rank 1 hung: no heartbeat since it started 3\.[0-9] s ago \(--hang_startup=3\)"
expect_in "$T/auto.err" "run with --log_dir to keep the stacks"
wait_for 10 no_leftovers
ok "auto: a rank that never beats while the others do is hung after the start-up allowance"

# 3b. Beats at a worker's very start count: the heartbeat files exist and are watched before any
# worker starts. 8 workers beat once, first thing, then stop: each must be found hung at the
# timeout, not taken for one still starting (--hang_startup) because its beat came before the
# watch (a CI run once found the waiting rank hung instead of the silent one that way).
worker beat_once <<'SH'
#!/bin/bash
[ -e "$DDPRUN_HEARTBEAT_FILE" ] || echo "rank $RANK: no $DDPRUN_HEARTBEAT_FILE at start" >> "$T/early"
touch "$DDPRUN_HEARTBEAT_FILE"
exec -a "stuck $T" sleep 1000
SH
set +e
timeout -k 5 120 "$DDPRUN" --nproc_per_node=8 --hang_timeout=2 --hang_startup=600 "$T/beat_once" \
  >"$T/once.out" 2>"$T/once.err"
RC=$?
set -e
expect_eq "$RC" 124 "exit code of workers that beat once at their start ($(cat "$T/once.err"))"
expect_in "$T/once.err" "hung: no progress for 2\.[0-9] s \(hang timeout 2\.0 s\)"
[[ ! -e "$T/early" ]] || fail "heartbeat files missing when workers started: $(cat "$T/early")"
wait_for 10 no_leftovers
ok "a beat at a worker's very start is seen: 8 workers that beat once are found hung at the timeout"

# 4. auto with a program that never beats: not judged, said once, the job ends normally.
worker no_beats <<'SH'
#!/bin/bash
exec -a "quiet $T" sleep 3
SH
run_ddprun quiet --nproc_per_node=2 --hang_timeout=auto:1 --hang_startup=1 --event_log="$T/quiet.jsonl" "$T/no_beats"
expect_eq "$RC" 0 "exit code of a job that never beats under auto"
expect_eq "$(grep -c "no worker touched its DDPRUN_HEARTBEAT_FILE" "$T/quiet.err")" 1 "times the missing beats are said"
expect_in "$T/quiet.jsonl" '"event":"heartbeats_missing"'
ok "auto: a program that never beats is not judged; ddprun says so once"

# 5. The status server: /healthz 200 while every rank beats, /status with pids and beat ages.
rm -f "$T/stop"
"$DDPRUN" --nproc_per_node=2 --hang_timeout=30 --status_port=0 "$T/beater" >"$T/status.out" 2>"$T/status.err" &
pid=$!
url=$(status_url "$T/status.err")
wait_for 30 test -e "$T/lastbeat.1"
python3 - "$url" <<'PY' || { touch "$T/stop"; wait $pid || true; fail "status server answers"; }
import json, sys, time, urllib.request
url = sys.argv[1]
assert urllib.request.urlopen(url + "/healthz").status == 200
for _ in range(200):
    status = json.load(urllib.request.urlopen(url + "/status"))
    if all(r["last_beat_age"] is not None for r in status["ranks"]):
        break
    time.sleep(0.05)
assert status["phase"] == "running" and status["hang_timeout"] == 30, status
assert [r["rank"] for r in status["ranks"]] == [0, 1], status
assert all(r["pid"] > 0 and r["running"] and 0 <= r["last_beat_age"] < 30 for r in status["ranks"]), status
assert status["restarts_left"] == 0 and status["healthy"] is True, status
PY
touch "$T/stop"
wait $pid || fail "ddprun with a status server exited $?"
ok "status server: /healthz 200, /status with ranks, pids and beat ages"
rm -f "$T/stop"

# 6. Two nodes: rank 3 (node 1, local rank 1) hangs; both nodes report it and restart.
port=$(free_tcp_port)
common=(--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.2 --master_port=$port --hang_timeout=2 --max_restarts=1)
HANG_RANK=3 STEPS=10 "$DDPRUN" --local_addr=127.0.0.3 "${common[@]}" --node_rank=1 --event_log="$T/b.jsonl" "$T/beater" >"$T/b.out" 2>"$T/b.err" &
pid_b=$!
HANG_RANK=3 STEPS=10 "$DDPRUN" --local_addr=127.0.0.2 "${common[@]}" --node_rank=0 --event_log="$T/a.jsonl" "$T/beater" >"$T/a.out" 2>"$T/a.err" &
pid_a=$!
rc_a=0; wait $pid_a || rc_a=$?
rc_b=0; wait $pid_b || rc_b=$?
expect_eq "$rc_a/$rc_b" 0/0 "exit codes of two nodes after a hang and a restart"
expect_in "$T/b.err" "rank 3 hung: no progress"
expect_in "$T/a.err" "stopping workers: worker rank 3 \(local rank 1\) on .* hung: no progress"
for n in a b; do
  expect_in "$T/$n.err" "restarting workers \(restart 1 of 1\)"
  expect_in "$T/$n.jsonl" '"event":"restart"'
done
expect_in "$T/b.jsonl" '"event":"hang".*"rank":3'
wait_for 10 no_leftovers
ok "two nodes: a hang on node 1 is reported on node 0, and both restart"

# 7. A Python worker, however it was started, is recognised by the program its process tree runs:
# `--no_python python3 x.py`, `sh -c "exec python3 x.py"`, and a bash script that starts python3
# as a child. With py-spy (the torch2 venv's, put in PATH) the summary shows Python frames; without
# it, one line says what is missing, once a run (here two hangs: a restart and a second hang), and
# the native stacks are shown.
# In $T, so that a worker left behind is found by its command line (no_leftovers, cleanup).
cp "$DDPRUN_TESTS_DIR/launcher/stuck_in_python.py" "$T/stuck.py"
worker py_child <<'SH'
#!/bin/bash
# python3 as a child of this script (not exec'd): the worker's own process is bash.
/usr/bin/python3 "$T/stuck.py"
exit $?
SH
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
with_py_spy=$PATH
[[ -x "$TORCH2_VENV/bin/py-spy" ]] && with_py_spy="$PATH:$TORCH2_VENV/bin"
for how in no_python sh_exec child; do
  case $how in
    no_python) program=(--no_python /usr/bin/python3 "$T/stuck.py") ;;
    sh_exec) program=(--no_python sh -c "exec /usr/bin/python3 $T/stuck.py") ;;
    child) program=("$T/py_child") ;;
  esac
  PATH=$with_py_spy run_ddprun "py_$how" --nproc_per_node=2 --hang_timeout=2 --log_dir="$T/logs_$how" "${program[@]}"
  expect_eq "$RC" 124 "exit code of a hung Python worker ($how)"
  expect_in "$T/py_$how.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
  if PATH=$with_py_spy command -v py-spy >/dev/null; then
    expect_in "$T/py_$how.err" "^        stuck_in_python \(.*stuck.py:[0-9]+\)"
    expect_not_in "$T/py_$how.err" "no Python stacks"
    expect_in "$(run_dir "$T/logs_$how")/attempt_0/rank_1/stacks.txt" "^== '.*py-spy' dump --pid"
    shown="Python frames"
  else
    expect_in "$T/py_$how.err" "no Python stacks: py-spy is not in PATH"
    shown="native frames (no py-spy: Python frames not checked)"
  fi
  if [[ $how == child ]]; then
    expect_in "$(run_dir "$T/logs_$how")/attempt_0/rank_1/stacks.txt" "^== worker [0-9]+ runs Python in its descendant [0-9]+: the stacks below are its ==$"
  fi
  wait_for 10 no_leftovers
  ok "a Python worker started as $how: hung, found, $shown"
done

# Without py-spy anywhere (PATH without it, nothing beside ddprun or python3): one line, once in
# a run with two hangs, and the native stacks.
[[ ! -x "$(dirname "$DDPRUN")/py-spy" && ! -x /usr/bin/py-spy ]] || fail "a py-spy beside ddprun or python3: cannot test its absence"
PATH=/usr/bin:/bin DDPRUN_PY_SPY= run_ddprun no_py_spy --nproc_per_node=2 --hang_timeout=2 --max_restarts=1 "$T/py_child"
expect_eq "$RC" 124 "exit code of a Python worker hung twice, without py-spy"
expect_eq "$(grep -c "restarting workers" "$T/no_py_spy.err")" 1 "restarts"
expect_eq "$(grep -c "hung: no progress" "$T/no_py_spy.err")" 2 "hangs found"
expect_eq "$(grep -c '^ddprun: no Python stacks: py-spy is not in PATH nor at .*(pip install py-spy, or the ddprun package: it brings py-spy); native stacks instead$' "$T/no_py_spy.err")" 1 \
  "lines saying that py-spy is missing ($(cat "$T/no_py_spy.err"))"
expect_in "$T/no_py_spy.err" "stuck in \(main thread, innermost first\):"
wait_for 10 no_leftovers
ok "no py-spy: said once in a run with two hangs; native stacks instead"

# 8. Bad values: one line naming the flag, exit 64, nothing started.
for bad in --hang_timeout=soon --hang_timeout=0 --hang_timeout=-3 --hang_timeout=auto:x --hang_timeout=1e30 \
           --hang_startup=0 --status_port=70000 --event_log="$T/no/such/dir/events"; do
  run_ddprun bad "$bad" "$T/beater"
  expect_eq "$RC" 64 "exit code for $bad"
  expect_eq "$(wc -l < "$T/bad.err")" 1 "lines of the error for $bad"
  expect_in "$T/bad.err" "^ddprun: error: ${bad%%=*}"
done
[[ ! -e "$T/lastbeat.0" ]] || [[ "$(find "$T" -name 'lastbeat.*' -newer "$T/bad.err" | wc -l)" == 0 ]] || fail "a worker started"
ok "bad --hang_timeout, --status_port and --event_log values are refused in one line"
