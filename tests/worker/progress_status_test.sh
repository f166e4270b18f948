#!/usr/bin/env bash
# An unmodified PyTorch DDP script (tests/worker/progress_probe.py steady: no heartbeat code) in
# this build's PyTorch (TORCH_PYTHON), under --hang_timeout=auto --status_port=0: the steps that
# ddprun's Python module keeps in each rank's progress record rise in /status, /metrics and
# `ddprun status`, with steps per second.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
"$TORCH_PYTHON" -c 'import torch' 2>/dev/null || skip "$TORCH_PYTHON has no torch"
export PYTHON_EXEC=$TORCH_PYTHON
unset PYTHONPATH
probe=$DDPRUN_TESTS_DIR/worker/progress_probe.py

"$DDPRUN" --nproc_per_node=2 --hang_timeout=auto --status_port=0 "$probe" steady "$T" >"$T/job.out" 2>"$T/job.err" &
job=$!
url=$(status_url "$T/job.err")
python3 - "$url" <<'PY' || { kill $job; wait $job || true; cat "$T/job.err" >&2; fail "steps in the live view"; }
import json, sys, time, urllib.request
url = sys.argv[1]
def ranks():
    return json.load(urllib.request.urlopen(url + "/status"))["ranks"]
deadline = time.monotonic() + 120
def stepping():  # both ranks listed: /status answers before the workers start, with no rank at all
    now = ranks()
    return len(now) == 2 and all(r["step"] is not None and r["step"] >= 10 and r["steps_per_second"] for r in now)
while not stepping():
    assert time.monotonic() < deadline, ranks()
    time.sleep(0.1)
first = [r["step"] for r in ranks()]
while not all(r["step"] > s for r, s in zip(ranks(), first)):
    assert time.monotonic() < deadline, ("steps do not rise", first, ranks())
    time.sleep(0.1)
metrics = urllib.request.urlopen(url + "/metrics").read().decode().splitlines()
for rank in (0, 1):
    prefix = 'ddprun_rank_steps_total{rank="%d",local_rank="%d"} ' % (rank, rank)
    line = next(l for l in metrics if l.startswith(prefix))
    assert int(line[len(prefix):]) >= first[rank], (line, first)
PY
"$DDPRUN" status "${url#http://}" >"$T/table.out" || fail "ddprun status exited $?"
for r in 0 1; do expect_in "$T/table.out" "^ +$r +[^ ]+ +[0-9]+ +running +[1-9][0-9]* +[0-9]+\.[0-9]{2} "; done
# Stopped as a user stops it; ddprun exits 128+SIGTERM once the workers are stopped.
kill -TERM $job
set +e; wait $job; RC=$?; set -e
expect_eq "$RC" 143 "exit code of ddprun stopped by SIGTERM"
ok "an unmodified DDP script: its optimizer steps rise in /status, /metrics and ddprun status"
