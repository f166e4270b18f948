#!/usr/bin/env bash
# The dying gasp (--snapshot_signal, issue 57 item 4): when a worker fails, the surviving workers
# get the signal and --snapshot_grace to save into DDPRUN_SNAPSHOT_DIR before they are stopped;
# the restarted round reads the step the failure happened in. A survivor with no handler (killed
# by the signal) is no failure and never the root cause; a second failure during the gasp is one,
# after the first; a handler that never ends is stopped after the grace; SIGTERM to ddprun cuts
# the gasp short; another node's survivors gasp too (the rendezvous's stop for a failure); off by
# default; bad values refused in one line.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

literally() { sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$1"; }
uid=$(id -u)
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then parent=/dev/shm; else parent=${TMPDIR:-/tmp}; fi
id_base="gasptest-$(basename "$T")"
folder() { echo "$parent/ddprun-snapshots.$uid.$1"; }
trap 'rc=$?; rm -rf "$parent"/ddprun-snapshots."$uid"."$id_base"*; cleanup $rc' EXIT

# gasp_worker CASE B0 B1 ...: local rank R behaves as B_R in the first round: `fail` exits 1 once every
# other rank of this worker's node is ready (its handler in place), `segv` dies of SIGSEGV in its
# handler, `save` saves the step it is in (7) to step.R.tmp and renames it, then exits 0, `none`
# has no handler (the signal kills it), `hang` writes a partial file and never ends its handler,
# `ignore` ignores the signal (a hung rank that cannot save). Every rank but the failing one
# waits; in a restarted round each reads rank 0's step (none: nothing there) and exits 0.
worker gasp_worker <<'SH'
#!/bin/sh
case_=$1; shift
eval "behaviour=\${$((LOCAL_RANK + 1))}"
step=7
if [ "$TORCHELASTIC_RESTART_COUNT" != 0 ]; then
  cat "$DDPRUN_SNAPSHOT_DIR/step.0" > "$T/$case_.read.$RANK" 2>/dev/null || echo none > "$T/$case_.read.$RANK"
  exit 0
fi
d=$DDPRUN_SNAPSHOT_DIR
case "$behaviour" in
  fail)
    others=$(($# - 1))
    while [ "$(ls "$T/$case_.ready" 2>/dev/null | wc -l)" -lt "$others" ]; do sleep 0.02; done
    echo "rank $RANK fails in step $step" >&2
    exit 1;;
  save) trap 'echo $step > "$d/step.$LOCAL_RANK.tmp"; mv "$d/step.$LOCAL_RANK.tmp" "$d/step.$LOCAL_RANK"; exit 0' USR1;;
  segv) trap 'kill -SEGV $$' USR1;;
  hang) trap 'printf partial > "$d/partial.$LOCAL_RANK"; touch "$T/$case_.gasping"; while :; do sleep 0.1; done' USR1;;
  ignore) trap '' USR1 USR2;;
esac
mkdir -p "$T/$case_.ready" && touch "$T/$case_.ready/$LOCAL_RANK"
sleep 120 &
wait $!
SH

# (a0) No handler anywhere: both survivors die of the signal, nothing is written, the job restarts.
id="$id_base-a0"
run_ddprun a0 --nproc_per_node=3 --max_restarts=1 --restart_backoff_max=0 --rdzv_id="$id" --snapshot_signal=SIGUSR1 \
  --event_log="$T/a0.jsonl" "$T/gasp_worker" a0 none fail none
expect_eq "$RC" 0 "(a0) with no handler anywhere ($(cat "$T/a0.err"))"
expect_in "$T/a0.err" "^ddprun: dying gasp: SIGUSR1 to 2 workers; nothing written; every worker ended in [0-9.]+ m?s$"
expect_eq "$(cat "$T/a0.read.0")" none "(a0) nothing saved"
expect_eq "$(events "$T/a0.jsonl" worker_failed rank)" 1 "(a0) the one failure"
ok "(a0) survivors with no handler die of the signal: no failure, nothing written, said so"

# (a) Rank 1 fails; rank 0 saves its step, rank 2 has no handler and dies of the signal. The
# restarted round reads step 7; rank 2's death by SIGUSR1 is ddprun's doing, no failure.
id="$id_base-a"
run_ddprun a --nproc_per_node=3 --max_restarts=1 --restart_backoff_max=0 --rdzv_id="$id" --snapshot_signal=SIGUSR1 \
  --event_log="$T/a.jsonl" "$T/gasp_worker" a save fail none
expect_eq "$RC" 0 "(a) the failure, the gasp, the restart ($(cat "$T/a.err"))"
expect_in "$T/a.err" "^ddprun: rank 1 \(local rank 1\) failed: exit code 1"
expect_in "$T/a.err" "^ddprun: dying gasp: SIGUSR1 to 2 workers; 1 file \(2 B\) written in [0-9.]+ m?s; every worker ended in [0-9.]+ m?s$"
for r in 0 1 2; do expect_eq "$(cat "$T/a.read.$r")" 7 "(a) the step rank $r read in the restarted round"; done
expect_eq "$(events "$T/a.jsonl" dying_gasp signal)" SIGUSR1 "(a) the record's signal"
expect_eq "$(events "$T/a.jsonl" dying_gasp ranks)" "[0, 2]" "(a) the ranks signalled"
expect_eq "$(events "$T/a.jsonl" dying_gasp files) $(events "$T/a.jsonl" dying_gasp bytes)" "1 2" "(a) files, bytes"
expect_eq "$(events "$T/a.jsonl" dying_gasp ended) $(events "$T/a.jsonl" dying_gasp still_running)" "workers_ended 0" \
  "(a) what ended the gasp"
expect_eq "$(events "$T/a.jsonl" worker_failed rank)" 1 "(a) the one failure"
python3 - "$T/a.jsonl" <<'PY' || fail "(a) rank 2's end by the gasp's SIGUSR1 is not ddprun's stop"
import json, sys
ends = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "worker_exited" and e["rank"] == 2]
sys.exit(not (ends[0]["signal"] == "SIGUSR1" and ends[0]["stopped_by_ddprun"]))
PY
wait_for 10 no_leftovers
ok "(a) rank 1 fails: rank 0 saves step 7 on SIGUSR1, the restarted round reads it; rank 2 killed by the signal is no failure"

# (b) The same without restarts: the job's root cause is rank 1, never the gasp's victim.
id="$id_base-b"
run_ddprun b --nproc_per_node=3 --max_restarts=0 --rdzv_id="$id" --snapshot_signal=USR1 --result_file="$T/b.json" \
  --event_log="$T/b.jsonl" "$T/gasp_worker" b save fail none
expect_eq "$RC" 1 "(b) the root cause's exit code ($(cat "$T/b.err"))"
expect_eq "$(json_field "$T/b.json" '["root_cause"]["rank"]') $(json_field "$T/b.json" '["root_cause"]["exit_code"]')" "1 1" \
  "(b) the result file's root cause"
expect_eq "$(events "$T/b.jsonl" worker_failed rank)" 1 "(b) the one failure"
expect_eq "$(cat "$(folder "$id")/step.0")" 7 "(b) the step kept for a requeue"
expect_not_in "$T/b.err" "rank 2 .*failed"
ok "(b) without restarts: exit 1, rank 1 the root cause; the saved step kept for a requeue"

# (c) A second failure during the gasp (rank 2 dies of SIGSEGV in its handler) is a failure after
# the first: rank 1 stays the root cause.
id="$id_base-c"
run_ddprun c --nproc_per_node=3 --max_restarts=0 --rdzv_id="$id" --snapshot_signal=SIGUSR1 --result_file="$T/c.json" \
  --event_log="$T/c.jsonl" "$T/gasp_worker" c save fail segv
expect_eq "$RC" 1 "(c) the root cause's exit code ($(cat "$T/c.err"))"
expect_eq "$(json_field "$T/c.json" '["root_cause"]["rank"]')" 1 "(c) the result file's root cause"
expect_eq "$(events "$T/c.jsonl" worker_failed rank | tr '\n' ' ')" "1 2 " "(c) both failures, rank 1 first"
expect_in "$T/c.err" "^ddprun: dying gasp: SIGUSR1 to 2 workers; 1 file \(2 B\) written in [0-9.]+ m?s; every worker ended in"
wait_for 10 no_leftovers
ok "(c) a second failure during the gasp is recorded after the first; the root cause stays rank 1"

# (d) The grace bounds the gasp: rank 0's handler writes a partial file and never ends, rank 2
# ignores the signal; both stopped after --snapshot_grace=1 (PET_SNAPSHOT_GRACE too).
id="$id_base-d"
PET_SNAPSHOT_GRACE=1 run_ddprun d --nproc_per_node=3 --max_restarts=0 --rdzv_id="$id" --snapshot_signal=SIGUSR1 \
  --event_log="$T/d.jsonl" "$T/gasp_worker" d hang fail ignore
expect_eq "$RC" 1 "(d) ($(cat "$T/d.err"))"
expect_in "$T/d.err" \
  "^ddprun: dying gasp: SIGUSR1 to 2 workers; 1 file \(7 B\) written in [0-9.]+ m?s within the 1.0 s grace \(--snapshot_grace\); 2 still running: stopping$"
expect_eq "$(events "$T/d.jsonl" dying_gasp ended) $(events "$T/d.jsonl" dying_gasp still_running)" "grace 2" "(d) its end"
within 1 60 "$(events "$T/d.jsonl" dying_gasp seconds)" || fail "(d) the gasp took $(events "$T/d.jsonl" dying_gasp seconds) s"
expect_eq "$(events "$T/d.jsonl" worker_failed rank)" 1 "(d) the one failure"
wait_for 10 no_leftovers
ok "(d) a handler that never ends and a rank that ignores the signal: stopped after the grace, the partial file said"

# (d2) Nothing written within the grace: said so.
id="$id_base-d2"
run_ddprun d2 --nproc_per_node=2 --max_restarts=0 --rdzv_id="$id" --snapshot_signal=SIGUSR2 --snapshot_grace=0.5 \
  "$T/gasp_worker" d2 ignore fail
expect_eq "$RC" 1 "(d2) ($(cat "$T/d2.err"))"
expect_in "$T/d2.err" \
  "^ddprun: dying gasp: SIGUSR2 to 1 worker; nothing written within the 0.5 s grace \(--snapshot_grace\); 1 still running: stopping$"
ok "(d2) nothing written within the grace: said so"

# (e) SIGTERM to ddprun during the gasp cuts it short: the workers are stopped with it at once.
id="$id_base-e"
"$DDPRUN" --nproc_per_node=3 --max_restarts=0 --rdzv_id="$id" --snapshot_signal=SIGUSR1 --snapshot_grace=600 \
  --event_log="$T/e.jsonl" "$T/gasp_worker" e hang fail none >"$T/e.out" 2>"$T/e.err" &
pid=$!
wait_for 60 test -e "$T/e.gasping"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
expect_eq "$rc" 143 "(e) SIGTERM during the gasp ($(cat "$T/e.err"))"
expect_in "$T/e.err" "^ddprun: dying gasp: SIGUSR1 to 2 workers; 1 file \(7 B\) written in [0-9.]+ m?s; cut short after [0-9.]+ m?s by SIGTERM to ddprun$"
expect_eq "$(events "$T/e.jsonl" dying_gasp ended)" signal "(e) its end"
wait_for 10 no_leftovers
ok "(e) SIGTERM to ddprun during the gasp: cut short, said, exit 143"

# (f) Off by default: no signal, nothing saved, the restarted round finds nothing.
id="$id_base-f"
run_ddprun f --nproc_per_node=3 --max_restarts=1 --restart_backoff_max=0 --rdzv_id="$id" --event_log="$T/f.jsonl" \
  "$T/gasp_worker" f save fail none
expect_eq "$RC" 0 "(f) ($(cat "$T/f.err"))"
for r in 0 1 2; do expect_eq "$(cat "$T/f.read.$r")" none "(f) what rank $r found"; done
expect_not_in "$T/f.err" "dying gasp"
expect_not_in "$T/f.jsonl" "dying_gasp|SIGUSR1"
ok "(f) off by default: no signal sent, nothing saved"

# (g) Two nodes: b's rank 2 fails; a's ranks 0 and 1 are stopped by the rendezvous for that
# failure, and gasp too. The next round reads the step, on b too: each node has its own folder
# (a mount namespace of its own, as on a cluster), and the job's secret has the replication copy
# a's files to b's before the next round's workers start. (Nodes that share one folder on one
# machine would each sweep the other's files at their own round's end.)
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
if ! can_nsnode; then
  echo "skipped: (g) two nodes needs root and unshare -m (a mount namespace for each node)"
else
export DDPRUN_RDZV_SECRET=gasp-test-secret
id="$id_base-g"
job=(--nnodes=2 --max_restarts=1 --restart_backoff_max=0 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
     --rdzv_id="$id" --rdzv_conf=join_timeout=60 --snapshot_signal=SIGUSR1)
# b's failing rank waits for its own node's others only (none): it waits for a's two instead.
worker pair_fail <<'SH'
#!/bin/sh
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  while [ "$(ls "$T/g.ready" 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.02; done
  exit 1
fi
exec "$T/gasp_worker" g x x x
SH
nsnode 127.0.0.3 b "${job[@]}" --nproc_per_node=1 "$T/pair_fail"
nsnode 127.0.0.2 a "${job[@]}" --nproc_per_node=2 --event_log="$T/g.jsonl" "$T/gasp_worker" g save save
finish_within 120 a
finish_within 60 b
expect_eq "$RC_a $RC_b" "0 0" "(g) two nodes ($(show a b))"
expect_in "$T/a.err" "^ddprun: dying gasp: SIGUSR1 to 2 workers; 2 files \(4 B\) written in [0-9.]+ m?s; every worker ended in"
expect_not_in "$T/b.err" "dying gasp"  # its one worker was the failure: no survivor
for r in 0 1 2; do expect_eq "$(cat "$T/g.read.$r")" 7 "(g) the step rank $r read in the next round"; done
wait_for 10 no_leftovers
ok "(g) two nodes: a failure on one makes the other node's workers gasp; the next round reads their step, on both nodes"
unset DDPRUN_RDZV_SECRET
fi

# (i) A hang: rank 1 stops beating (and ignores SIGUSR1: it cannot save); found hung after 2 s,
# the gasp still signals both ranks: rank 0 saves, rank 1 is stopped after the grace. The root
# cause is the hang (exit 124).
worker beater <<'SH'
#!/bin/bash
n=0
if [ "$RANK" = 1 ]; then trap '' USR1; else trap 'echo $n > "$DDPRUN_SNAPSHOT_DIR/step.0.tmp"; mv "$DDPRUN_SNAPSHOT_DIR/step.0.tmp" "$DDPRUN_SNAPSHOT_DIR/step.0"; exit 0' USR1; fi
while :; do
  touch "$DDPRUN_HEARTBEAT_FILE"; n=$((n + 1))
  [ "$RANK" = 1 ] && [ $n -ge 5 ] && exec -a "stuck $T" sleep 1000
  sleep 0.1
done
SH
id="$id_base-i"
run_ddprun i --nproc_per_node=2 --hang_timeout=2 --max_restarts=0 --rdzv_id="$id" --snapshot_signal=SIGUSR1 \
  --snapshot_grace=1 --result_file="$T/i.json" --event_log="$T/i.jsonl" "$T/beater"
expect_eq "$RC" 124 "(i) a hung job ($(cat "$T/i.err"))"
expect_in "$T/i.err" "rank 1 hung: no progress"
expect_in "$T/i.err" \
  "^ddprun: dying gasp: SIGUSR1 to 2 workers; 1 file \([0-9]+ B\) written in [0-9.]+ m?s within the 1.0 s grace \(--snapshot_grace\); 1 still running: stopping$"
expect_eq "$(json_field "$T/i.json" '["root_cause"]["rank"]') $(json_field "$T/i.json" '["root_cause"]["kind"]')" "1 hang" \
  "(i) the root cause"
[[ -s $(folder "$id")/step.0 ]] || fail "(i) rank 0 saved nothing"
wait_for 10 no_leftovers
ok "(i) a hang: both ranks signalled, rank 0 saves, the hung rank is stopped after the grace; the hang stays the root cause"

# (h) A real DDP job (gloo, PyTorch 1.13 of Debian's python3): rank 1 dies after step 5; rank 0,
# whose next all_reduce fails, holds the model of step 5 and saves it on SIGUSR1 (torch.save to a
# temporary name, os.replace); the restarted round loads it and resumes at step 6 with the same
# parameters.
TORCH_PY=${TORCH_PYTHON:-/usr/bin/python3}
if "$TORCH_PY" -c 'import torch.distributed' 2>/dev/null; then
  cat > "$T/ddp_gasp.py" <<'PY'
import os, signal, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

T, rank = os.environ["T"], int(os.environ["RANK"])
ckpt = os.path.join(os.environ["DDPRUN_SNAPSHOT_DIR"], "ddp.pt")
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
done = 0  # the last step whose update was applied on every rank
if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    done = state["step"]
    total = sum(p.sum().item() for p in model.parameters())
    with open(os.path.join(T, "h.read.%d" % rank), "w") as f:
        f.write("%d %.6f" % (done + 1, total))
    sys.exit(0)

def save(signum, frame):
    tmp = ckpt + ".tmp"
    torch.save({"step": done, "model": model.module.state_dict()}, tmp)
    os.replace(tmp, ckpt)
    os._exit(0)

signal.signal(signal.SIGUSR1, save)
try:
    for step in range(1, 1000):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        done = step
        if rank == 0:
            with open(os.path.join(T, "h.sum.%d" % step), "w") as f:
                f.write("%.6f" % sum(p.sum().item() for p in model.parameters()))
        if rank == 1 and step == 5:
            print("rank 1 dies after step 5", file=sys.stderr, flush=True)
            os._exit(1)
except RuntimeError:
    pass  # the peer is gone: wait for the gasp (or the stop)
while True:
    time.sleep(0.1)
PY
  id="$id_base-h"
  PYTHON_EXEC=$TORCH_PY run_ddprun h --nproc_per_node=2 --max_restarts=1 --restart_backoff_max=0 --rdzv_id="$id" \
    --snapshot_signal=SIGUSR1 --snapshot_grace=60 --event_log="$T/h.jsonl" "$T/ddp_gasp.py"
  expect_eq "$RC" 0 "(h) the DDP job ($(cat "$T/h.err"))"
  expect_in "$T/h.err" "^ddprun: rank 1 \(local rank 1\) failed: exit code 1"
  expect_in "$T/h.err" "^ddprun: dying gasp: SIGUSR1 to 1 worker; 1 file \([0-9.]+ (B|KiB)\) written in [0-9.]+ m?s; the worker ended in"
  for r in 0 1; do
    expect_eq "$(cat "$T/h.read.$r")" "6 $(cat "$T/h.sum.5")" "(h) rank $r's resumed step and parameters"
  done
  expect_eq "$(events "$T/h.jsonl" worker_failed rank)" 1 "(h) the one failure"
  wait_for 10 no_leftovers
  ok "(h) DDP on gloo: rank 0 saves step 5's model on SIGUSR1 after rank 1 died; the next round resumes at step 6 with it"
else
  echo "note: $TORCH_PY has no torch.distributed: the DDP case (h) is not run"
fi

# Bad values: one line, exit 64, nothing started.
for bad in SIGKILL 9 SIGSTOP lots; do
  run_ddprun bad --snapshot_signal="$bad" "$T/gasp_worker" bad save
  expect_eq "$RC" 64 "--snapshot_signal=$bad"
  expect_eq "$(wc -l < "$T/bad.err")" 1 "lines said for --snapshot_signal=$bad"
  expect_in "$T/bad.err" "^ddprun: error: --snapshot_signal=$bad: expected off or a signal among SIGHUP"
done
run_ddprun bad --snapshot_signal=USR1 --snapshot=off "$T/gasp_worker" bad save
expect_eq "$RC" 64 "--snapshot_signal with --snapshot=off"
expect_in "$T/bad.err" "^ddprun: error: --snapshot_signal=USR1: the dying gasp saves into DDPRUN_SNAPSHOT_DIR, which --snapshot=off turns off"
run_ddprun bad --snapshot_grace=0 "$T/gasp_worker" bad save
expect_eq "$RC" 64 "--snapshot_grace=0"
[[ ! -e "$T/bad.ready" ]] || fail "a worker started despite a bad value"
ok "bad values: one line each, exit 64, no worker started"
