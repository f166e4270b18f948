#!/usr/bin/env bash
# --chaos against the goodput benchmark's own measure (issue 58: "--chaos ... its reported ETT%
# agrees with the goodput benchmark's own measurement"): scripts/bench/goodput.py --injector ddprun
# runs its gloo DDP training script (2 workers, one node, checkpoints in DDPRUN_SNAPSHOT_DIR, so
# that the ledger knows the work redone) under ddprun --chaos=mtbf=8,kinds=kill,seed=3 for 40 s,
# measures the share of the wall time that trained from the steps the workers stamp (final step x
# step time / the launch to the end) and checks it against the ledger's ETT% within AGREE points.
#
# AGREE = 10 percentage points. The two measure the same thing by different clocks, and differ by
# what each counts: the ledger's training starts at every rank's first collective (DDP's set-up,
# before the first step) where the benchmark counts steps, so each round's set-up (a few hundred ms
# on a loaded 2-core machine, 3 to 5 rounds) is training to the ledger and not to the benchmark;
# the ledger's wall ends at ddprun's exit, after the driver's SIGTERM stopped the workers (up to a
# second or two), the benchmark's at the SIGTERM; the step time is the run's mean, and a step's
# time varies with the machine's load. Each is a few points of a 40 s run; a ledger that counted a
# recovery or the work redone as training would be off by far more (each kill costs 5 s or more of
# a torch restart: 12 points and more).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

PY=${TORCH_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch.distributed' 2>/dev/null || skip "$PY has no torch.distributed"
AGREE=10
set +e
TMPDIR=$T python3 "$DDPRUN_SOURCE_DIR/scripts/bench/goodput.py" --injector ddprun --only ddprun-snapshots \
  --seconds 40 --mean_kill_interval 8 --seed 3 --save_every 5 --fault_free_seconds 0 \
  --ddprun "$DDPRUN" --python "$PY" --agree "$AGREE" >"$T/bench.out" 2>"$T/bench.err"
rc=$?
set -e
cat "$T/bench.out"
[[ $rc == 0 ]] || { cat "$T/bench.err" >&2; fail "the benchmark and the ledger disagree, or the run failed (exit $rc)"; }
expect_in "$T/bench.out" "^ddprun-snapshots: the benchmark's goodput [0-9.]+% .* the ledger's ETT% [0-9.]+%: [0-9.]+ points apart; [1-9][0-9]* faults injected by --chaos, [1-9][0-9]* failures counted as injected"
ok "--chaos on one node: the ledger's ETT% within $AGREE points of the goodput benchmark's own measure"
