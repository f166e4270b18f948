#!/usr/bin/env bash
# SyncBatchNorm against PyTorch (issue 18): DDP training with convert_sync_batchnorm, 2 gloo ranks
# with batches of 3 and 5 samples (tests/worker/syncbn_driver.cpp), must end with the parameters,
# running statistics and evaluation output that PyTorch's BatchNorm gives on the concatenated
# batch (tests/worker/syncbn_reference.py, TORCH_PYTHON, which says why that is the reference).
# The model is in float64 and the arithmetic the same up to the order of the sums (Welford
# merges of the ranks' statistics, sums of per-rank sums): the two agree to a few units in the
# 15th or 16th digit, and TOLERANCE leaves a margin of 300 over that. Leaving the BatchNorms
# unsynchronised must break the agreement (the test would be blind otherwise). A rank may bring
# an empty batch. A training pass starts one all-gather (forward) and one all-reduce (backward)
# per SyncBatchNorm; an evaluation pass starts none.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
"$TORCH_PYTHON" -c 'import torch' 2>/dev/null || skip "$TORCH_PYTHON has no torch"
steps=6
tolerance=1e-12

mkdir -p "$T/py" "$T/sync" "$T/plain"
"$TORCH_PYTHON" "$DDPRUN_TESTS_DIR/worker/syncbn_reference.py" "$T/py" $steps >"$T/py.log" 2>&1 \
  || { cat "$T/py.log"; fail "the PyTorch reference failed"; }
for mode in sync plain; do
  DDPRUN_COLLECTIVE_TIMEOUT=30 "$DDPRUN" --nproc_per_node=2 "$SYNCBN_DRIVER" "$T/$mode" $steps $mode >"$T/$mode.log" 2>&1 \
    || { cat "$T/$mode.log"; fail "$mode: the C++ run failed"; }
done

for r in 0 1; do
  for what in state eval; do
    "$RANK_DRIVER" compare "$T/py/$what" "$T/sync/$what.$r" $tolerance >"$T/compare.log" \
      || { cat "$T/compare.log"; fail "rank $r: $what differs from PyTorch's BatchNorm on the global batch"; }
    echo "rank $r, $what: $(cat "$T/compare.log")"
  done
done
cmp -s "$T/sync/state.0" "$T/sync/state.1" || fail "the two C++ ranks differ"
ok "parameters, running statistics and evaluation output are PyTorch's, on both ranks"
"$RANK_DRIVER" compare "$T/py/empty_peer" "$T/sync/empty_peer.0" $tolerance >"$T/compare.log" \
  || { cat "$T/compare.log"; fail "with an empty batch on rank 1, rank 0 differs from PyTorch"; }
ok "with an empty batch on rank 1, rank 0 normalises with its own batch: $(cat "$T/compare.log")"

! "$RANK_DRIVER" compare "$T/py/state" "$T/plain/state.0" 1e-3 >"$T/compare.log" \
  || fail "plain BatchNorm also matches the global batch: the test cannot see synchronisation"
ok "plain BatchNorm differs: $(cat "$T/compare.log")"

expect_eq "$(cat "$T/sync/collectives.0")" $'train 6\neval 0' "collectives of 3 SyncBatchNorms"
expect_eq "$(cat "$T/plain/collectives.0")" $'train 0\neval 0' "collectives of plain BatchNorms"
ok "training starts one collective per SyncBatchNorm each way; evaluation none"
