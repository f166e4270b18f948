#!/usr/bin/env bash
# The live view with a real ddprun and real workers (bash scripts that print "step N", counted
# through --progress_pattern): /status gains each rank's steps, steps per second and time since
# its last step, and the job's total steps, slowest rank and stragglers; /metrics says the same,
# and the restarts, rounds, hangs and failures by kind, in Prometheus' text format; `ddprun
# status` draws it in a terminal, and refuses bad input in one line; a program named status still
# runs as ./status.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

pattern='^step (?<step>[0-9]+)'
# stepper: ranks 0 and 1 print a step every 0.05 s, rank 2 one every 0.5 s (a straggler), until
# $T/stop exists.
worker stepper <<'SH'
#!/bin/bash
pause=0.05; [ "$RANK" = 2 ] && pause=0.5
n=0
while [ ! -e "$T/stop" ]; do n=$((n + 1)); echo "step $n"; sleep $pause; done
SH

# 1. /status and /metrics of a job whose rank 2 steps ten times slower.
"$DDPRUN" --nproc_per_node=3 --status_port=0 --progress_pattern="$pattern" --rdzv_id='job "7"\x' \
  "$T/stepper" >"$T/pace.out" 2>"$T/pace.err" &
pid=$!
url=$(status_url "$T/pace.err")
port=${url##*:}
python3 - "$url" "$T" <<'PY' || { touch "$T/stop"; wait $pid || true; fail "the live view's progress"; }
import json, sys, time, urllib.request
url, folder = sys.argv[1], sys.argv[2]
def status():
    return json.load(urllib.request.urlopen(url + "/status"))
deadline = time.monotonic() + 90
while True:
    s = status()
    ranks = s["ranks"]
    if (all(r["steps_per_second"] is not None for r in ranks) and ranks[2]["step"] >= 4
            and s["stragglers"] == [2] and s["slowest_rank"] == 2):
        break
    assert time.monotonic() < deadline, s
    time.sleep(0.1)
assert s["total_steps"] == sum(r["step"] for r in ranks), s
assert s["host"] and s["nodes"] == 1 and s["node_rank"] == 0, s
assert all(r["state"] == "running" and r["hung"] is False and r["since_last_step"] >= 0 for r in ranks), s
assert ranks[0]["steps_per_second"] > ranks[2]["steps_per_second"] > 0, s
# Steps rise between two looks.
first = [r["step"] for r in ranks]
while [r["step"] for r in status()["ranks"]][0] <= first[0]:
    assert time.monotonic() < deadline, "rank 0's steps do not rise"
    time.sleep(0.05)
response = urllib.request.urlopen(url + "/metrics")
assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8", response.headers
open(folder + "/metrics.txt", "wb").write(response.read())
PY
m="$T/metrics.txt"
for family in ddprun_info ddprun_restarts_total ddprun_rounds_total ddprun_workers_running ddprun_hangs_total \
              ddprun_worker_failures_total ddprun_nodes ddprun_node_rank ddprun_rank_steps_total \
              ddprun_rank_last_progress_age_seconds; do
  expect_in "$m" "^# HELP $family "
  expect_in "$m" "^# TYPE $family (counter|gauge)$"
done
expect_in "$m" '^ddprun_info\{version="[^"]+",run_id="job \\"7\\"\\\\x",host="[^"]+"\} 1$'
expect_in "$m" '^ddprun_rank_steps_total\{rank="2",local_rank="2"\} [1-9][0-9]*$'
expect_in "$m" '^ddprun_workers_running 3$'
expect_in "$m" '^ddprun_worker_failures_total\{kind="hang"\} 0$'
ok "/status: steps, steps/s, time since the last step, total, slowest rank 2, stragglers [2]; /metrics"

# 2. `ddprun status` draws the same: the job line, then a row a rank; --watch again every second.
run_ddprun table status "$port"
expect_eq "$RC" 0 "exit code of ddprun status"
expect_in "$T/table.out" '^job: running, round [0-9]+, attempt 0, restarts 0 \(0 left\), node .* \(0 of 1\), healthy; [0-9]+ steps in all, slowest rank 2, stragglers: 2$'
expect_in "$T/table.out" '^rank +node +pid +state +steps +steps/s +since last step +hung\?$'
for r in 0 1 2; do expect_in "$T/table.out" "^ +$r +[^ ]+ +[0-9]+ +running +[0-9]+ +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9] s +no$"; done
expect_in "$T/table.out" '^[^ ]+: goodput [0-9.]+%: started in [0-9.]+ s, no failures'
expect_eq "$(wc -l <"$T/table.out")" 6 "lines of ddprun status"
run_ddprun url status "$url/status"
expect_eq "$RC" 0 "ddprun status with the URL ddprun printed"
"$DDPRUN" status --watch "127.0.0.1:$port" >"$T/watch.out" 2>"$T/watch.err" &
watch=$!
drawn_twice() { [[ $(grep -c '^job: ' "$T/watch.out") -ge 2 ]]; }
wait_for 30 drawn_twice
kill "$watch"; wait "$watch" || true
ok "ddprun status: a row a rank and the job line; --watch draws it again"

touch "$T/stop"
set +e; wait "$pid"; RC=$?; set -e
expect_eq "$RC" 0 "exit code of the stepping job"

# 3. Bad input and nobody there: one line, non-zero; nothing started.
run_ddprun gone status "$port"
expect_eq "$RC" 69 "exit code of ddprun status when the job is gone"
expect_in "$T/gone.err" "^ddprun: error: status 127\.0\.0\.1:$port: .* \(is a ddprun with --status_port=$port running there\?\)$"
for args in "" "nonsense" "host:" "70000" "$port host:" "--bogus 1"; do
  # shellcheck disable=SC2086  # each case is a list of arguments
  run_ddprun bad status $args
  expect_eq "$RC" 64 "exit code of ddprun status $args"
  expect_eq "$(wc -l <"$T/bad.err")" 1 "lines of the error for ddprun status $args"
  expect_in "$T/bad.err" "^ddprun: error: status"
done
expect_not_in "$T/bad.err" "^ddprun: status at"
ok "ddprun status: bad input and an absent server are one line, exit 64 and 69"

# 4. A program named status: as ./status, after --, or after an option it is the program.
worker status <<'SH'
#!/bin/bash
echo "the program named status ran as rank $RANK"
SH
(cd "$T" && "$DDPRUN" ./status >"$T/prog.out" 2>"$T/prog.err") || fail "ddprun ./status exited $?"
expect_in "$T/prog.out" "the program named status ran as rank 0"
for args in "-- status" "--nproc_per_node=1 status"; do
  # shellcheck disable=SC2086
  PATH="$T:$PATH" run_ddprun prog $args
  expect_eq "$RC" 0 "exit code of ddprun $args"
  expect_in "$T/prog.out" "the program named status ran as rank 0"
done
ok "a program named status runs as ./status, after --, or after an option"

# 5. Two nodes (on 127.0.0.2 and .3), two ranks each: each ddprun shows its own ranks; `ddprun
#    status` given both makes one table of the job's four ranks, and rank 2 (node 1) the straggler.
rm -f "$T/stop"
master=$(free_tcp_port)
common=(--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.2 --master_port=$master --status_port=0
        --progress_pattern="$pattern")
"$DDPRUN" --local_addr=127.0.0.3 "${common[@]}" --node_rank=1 "$T/stepper" >"$T/b.out" 2>"$T/b.err" &
pid_b=$!
"$DDPRUN" --local_addr=127.0.0.2 "${common[@]}" --node_rank=0 "$T/stepper" >"$T/a.out" 2>"$T/a.err" &
pid_a=$!
url_a=$(status_url "$T/a.err")
url_b=$(status_url "$T/b.err")
two_nodes_shown() {
  "$DDPRUN" status "$url_a" "$url_b" >"$T/nodes.out" 2>"$T/nodes.err" &&
    grep -Eq '^job: running, .*, nodes [^ ]+ \(0 of 2\), [^ ]+ \(1 of 2\), healthy; [0-9]+ steps in all, slowest rank 2, stragglers: 2$' "$T/nodes.out" &&
    [[ $(grep -Ec '^ +[0-3] +[^ ]+ +[0-9]+ +running +[0-9]+ +[0-9]+\.[0-9]{2} ' "$T/nodes.out") == 4 ]]
}
deadline=$((SECONDS + 90))
until two_nodes_shown; do
  (( SECONDS < deadline )) || { touch "$T/stop"; wait $pid_a $pid_b || true; cat "$T/nodes.out" "$T/nodes.err" >&2; fail "ddprun status of two nodes"; }
  sleep 0.1
done
expect_eq "$(sed -n '3,6s/^ *\([0-9]\).*/\1/p' "$T/nodes.out" | tr -d '\n')" 0123 "ranks of the two nodes, in order"
python3 - "$url_b" <<'PY' || { touch "$T/stop"; wait $pid_a $pid_b || true; fail "node 1's /status and /metrics"; }
import json, sys, urllib.request
url = sys.argv[1]
s = json.load(urllib.request.urlopen(url + "/status"))
assert [r["rank"] for r in s["ranks"]] == [2, 3] and s["nodes"] == 2 and s["node_rank"] == 1, s
text = urllib.request.urlopen(url + "/metrics").read().decode().splitlines()
for line in ["ddprun_nodes 2", "ddprun_node_rank 1", "ddprun_world_size 4"]:
    assert line in text, (line, text)
PY
touch "$T/stop"
rc_a=0; wait $pid_a || rc_a=$?
rc_b=0; wait $pid_b || rc_b=$?
expect_eq "$rc_a/$rc_b" 0/0 "exit codes of the two nodes"
ok "two nodes: each shows its ranks; ddprun status of both, one table of four ranks, straggler rank 2"

# 6. Restarts, rounds, hangs and failures by kind: rank 1 dies of SIGSEGV in the first round,
#    exits 3 in the second, hangs (prints nothing) in the third, and steps in the fourth.
worker failing <<'SH'
#!/bin/bash
if [ "$RANK" = 1 ]; then
  case "$TORCHELASTIC_RESTART_COUNT" in
    0) kill -SEGV $$ ;;
    1) exit 3 ;;
    2) while [ ! -e "$T/stop2" ]; do sleep 0.1; done; exit 0 ;;
  esac
fi
n=0
while [ ! -e "$T/stop2" ]; do n=$((n + 1)); echo "step $n"; sleep 0.05; done
SH
"$DDPRUN" --nproc_per_node=2 --max_restarts=3 --status_port=0 --hang_timeout=10 --hang_startup=10 \
  --progress_pattern="$pattern" "$T/failing" >"$T/failing.out" 2>"$T/failing.err" &
pid=$!
url=$(status_url "$T/failing.err")
wait_for 120 grep -q "restarting workers (restart 3 of 3)" "$T/failing.err"
python3 - "$url" "$T/failures.txt" <<'PY' || { touch "$T/stop2"; wait $pid || true; fail "failures in /metrics"; }
import sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
want = ['ddprun_restarts_total 3', 'ddprun_rounds_total 4', 'ddprun_hangs_total 1', 'ddprun_workers_running 2',
        'ddprun_worker_failures_total{kind="segfault"} 1', 'ddprun_worker_failures_total{kind="exit_code"} 1',
        'ddprun_worker_failures_total{kind="hang"} 1', 'ddprun_rank_steps_total{rank="1",local_rank="1"}']
deadline = time.monotonic() + 60
while True:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    lines = text.splitlines()
    if all(any(l.startswith(w) for l in lines) for w in want):
        break
    if time.monotonic() > deadline:
        open(out, "w").write(text)
        raise SystemExit("missing: %s" % [w for w in want if not any(l.startswith(w) for l in lines)])
    time.sleep(0.1)
PY
touch "$T/stop2"
set +e; wait "$pid"; RC=$?; set -e
expect_eq "$RC" 0 "exit code of the job that failed three times"
ok "/metrics: 3 restarts, 4 rounds, 1 hang, failures by kind (segfault, exit_code, hang)"
