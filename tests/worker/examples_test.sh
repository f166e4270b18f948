#!/usr/bin/env bash
# An unmodified DDP training script (tests/worker/examples/ddp_tutorial.py: the shape of PyTorch's
# DDP tutorial series, on gloo), in this build's PyTorch (TORCH_PYTHON), under
# ddprun --hang_timeout=auto:5 --max_restarts=1 --status_port=0, with nothing of ddprun's in it:
#  1. /status shows each rank's steps rising (ddprun's Python module counts optimizer steps);
#  2. rank 1 frozen (SIGSTOP: the script unchanged) is found: the job counts as hung within the
#     learned timeout of the stop, with the last step and the stacks. Which rank is named depends
#     on where the stop caught rank 1: inside DDP's backward, both ranks wait in the same
#     all-reduce and their last beats are within 100 ms of each other, so either may be named;
#     the test accepts both (tests/worker/culprit_test.sh checks the naming where it is certain);
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
        if status["attempt"] == attempt and all(r["running"] and r["step"] for r in ranks):
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

date +%s.%N >"$T/stopped_at"
kill -STOP "$(cat "$T/rank1.pid")"
rising "$url" 1 "$T/rank1.again.pid"
expect_in "$T/err" "ranks? [01](, [01])? hung: .*no progress for [0-9.]+ s \(hang timeout [0-9.]+ s; last step [0-9]+\)"
expect_in "$T/out" "Resuming training from snapshot at Epoch [1-9]"
learned=$(python3 -c '
import json, sys
print(max(e["hang_timeout"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "hang_timeout_learned"))' "$T/events.jsonl")
named=$(python3 -c '
import json, sys
print(next(e["rank"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "hang"))' "$T/events.jsonl")
delay=$(hang_delay "$T/events.jsonl" "$named" "$T/stopped_at")
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
ok "rank 1 frozen: the hang found ${delay} s after the stop (learned timeout ${learned} s), rank $named named$stacks; restarted from the snapshot, steps rise again"

kill -TERM "$pid"
set +e; wait "$pid"; RC=$?; set -e
expect_eq "$RC" 143 "exit code of ddprun stopped by SIGTERM"
wait_for 20 no_leftovers
