#!/usr/bin/env bash
# An unmodified DDP training script (tests/worker/examples/ddp_tutorial.py: the shape of PyTorch's
# DDP tutorial series, on gloo), in this build's PyTorch (TORCH_PYTHON), under
# ddprun --hang_timeout=auto:5 --max_restarts=1 --status_port=0, with nothing of ddprun's in it:
#  1. /status shows each rank's steps rising (ddprun's Python module counts optimizer steps);
#  2. rank 1 frozen (SIGSTOP: the script unchanged) outside DDP's backward is found within the
#     learned timeout of the stop and named from the progress records: ddprun's module counts
#     DDP's backward passes as collectives ("ddp_backward"), so rank 0 waits in the next one, which
#     rank 1 has not entered; its last step and the stacks. (Stopped inside a backward, rank 1
#     may have entered the very all-reduce rank 0 waits in, and the records cannot tell them
#     apart: tests/worker/culprit_test.sh, case 4. So the test stops rank 1 again until its record,
#     read once it is stopped, says it is not in one.)
#  3. the job restarts: the script resumes from its snapshot, and steps rise again.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
torch_workers

"$DDPRUN" --nproc_per_node=2 --hang_timeout=auto:5 --max_restarts=1 --status_port=0 --log_dir="$T/logs" \
  --event_log="$T/events.jsonl" "$DDPRUN_TESTS_DIR/worker/examples/ddp_tutorial.py" 100000 1 \
  --snapshot "$T/snapshot.pt" >"$T/out" 2>"$T/err" &
pid=$!  # its command line and its workers' name $T: the cleanup stops them, a frozen one too
url=$(status_url "$T/err")

# rising URL ATTEMPT OUT: waits until every rank of ATTEMPT has made steps, and then more; writes
# rank 1's pid to OUT.
rising() {
  python3 - "$@" <<'PY' || fail "steps of attempt $2 in /status ($(cat "$T/err"))"
import json, sys, time, urllib.request
url, attempt, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 120
def steps():
    while True:
        status = json.load(urllib.request.urlopen(url + "/status"))
        ranks = sorted(status["ranks"], key=lambda r: r["rank"])
        # Both ranks listed: /status answers before the workers start (with --warm_start, while
        # the warm interpreter imports), with no rank at all.
        if status["attempt"] == attempt and len(ranks) == 2 and all(r["running"] and r["step"] for r in ranks):
            return status, [r["step"] for r in ranks]
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
_, first = steps()
status, later = steps()
while not all(b > a for a, b in zip(first, later)):
    assert time.monotonic() < deadline, (first, later)
    time.sleep(0.2)
    status, later = steps()
open(out, "w").write(str(next(r["pid"] for r in status["ranks"] if r["rank"] == 1)))
PY
}

rising "$url" 0 "$T/rank1.pid"
ok "/status: each rank's steps rise, with nothing of ddprun's in the script"
# auto judges nothing before it has learned a timeout from a few beats (at most every 100 ms),
# and steps may rise faster than that.
wait_for 60 grep -qs '"event":"hang_timeout_learned"' "$T/events.jsonl"

# stop_outside_backward PID: SIGSTOPs PID, and once it is stopped reads its progress record (in
# its DDPRUN_HEARTBEAT_FILE); inside a collective, it lets it go on and tries again. Writes the
# time of the stop that stayed to $T/stopped_at, the record to $T/stopped_record, and how many
# stops it took to $T/stops.
stop_outside_backward() {
  local pid=$1 heartbeat record stops
  heartbeat=$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^DDPRUN_HEARTBEAT_FILE=//p')
  for stops in $(seq 100); do
    date +%s.%N >"$T/stopped_at"
    kill -STOP "$pid"
    wait_for 10 stopped "$pid"
    record=$(head -c 128 "$heartbeat")
    if [[ $record =~ \ in=0\  ]]; then
      echo "$record" >"$T/stopped_record"
      echo "$stops" >"$T/stops"
      return
    fi
    kill -CONT "$pid"
  done
  fail "rank 1 was inside a collective at each of 100 stops (its record: $record)"
}
stopped() { [[ $(awk '{print $3}' "/proc/$1/stat") == T ]]; }

stop_outside_backward "$(cat "$T/rank1.pid")"
record=$(cat "$T/stopped_record")
[[ $record =~ ^step=([0-9]+)\ coll=([0-9]+)\ in=0\ op=ddp_backward\  ]] ||
  fail "rank 1's record when stopped: '$record' (expected its steps and DDP backward passes)"
step=${BASH_REMATCH[1]} last=${BASH_REMATCH[2]}
rising "$url" 1 "$T/rank1.again.pid"
expect_in "$T/err" "^ddprun: rank 1 hung: rank 0 waits in ddp_backward #$((last + 1)); rank 1 has not entered it: last in ddp_backward #$last; no progress for [0-9.]+ s \(hang timeout [0-9.]+ s; last step $step\); collecting the stacks of 2 workers$"
expect_in "$T/out" "Resuming training from snapshot at Epoch [1-9]"
learned=$(python3 -c '
import json, sys
print(max(e["hang_timeout"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "hang_timeout_learned"))' "$T/events.jsonl")
named=$(python3 -c '
import json, sys
print([e["rank"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "hang"])' "$T/events.jsonl")
expect_eq "$named" "[1]" "the ranks of the hang events"
delay=$(hang_delay "$T/events.jsonl" 1 "$T/stopped_at")
# Found within the learned timeout of the stop (its last beat came before it), and 1 s for the
# check to run on a loaded machine.
within 0 "$(python3 -c "print($learned + 1)")" "$delay" ||
  fail "the hang found ${delay} s after rank 1 was stopped (learned timeout ${learned} s)"
logs=$(run_dir "$T/logs")
for r in 0 1; do expect_in "$logs/attempt_0/rank_$r/stacks.txt" "^== "; done
stacks=""
if command -v py-spy >/dev/null; then
  # Rank 0 runs: py-spy shows where in the script it waits. (The stopped rank 1 may not be
  # readable by py-spy, which then says so, and its native stack is there.)
  expect_in "$logs/attempt_0/rank_0/stacks.txt" "\(ddp_tutorial.py:[0-9]+\)"
  stacks=", rank 0's Python stack"
fi
ok "rank 1 frozen after ddp_backward #$last (at stop $(cat "$T/stops"); those before it caught it inside one): named ${delay} s after the stop (learned timeout ${learned} s; rank 0 waits in #$((last + 1)))$stacks; restarted from the snapshot, steps rise again"

kill -TERM "$pid"
set +e; wait "$pid"; RC=$?; set -e
expect_eq "$RC" 143 "exit code of ddprun stopped by SIGTERM"
wait_for 20 no_leftovers
