#!/usr/bin/env bash
# DDP is plain SGD on the global batch: W ranks with batch B each for 20 steps end with the
# parameters of one process with batch W*B (1e-5), bit-identical on every rank; also with
# no_sync gradient accumulation, with gradients set to none instead of zeroed, and with
# gradient_as_bucket_view off (rank_driver also checks where the gradients live). Ranks start
# from different weights: the broadcast must work. Then on 2 ranks: the same after user code
# gave the parameters new storage halfway (a checkpoint load, torch::load, set_data, set_, a
# dtype round trip), which drops the autograd nodes DDP hooks; and a model converted to another
# dtype after the wrapper exists is refused with an error, not trained unsynchronised.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
total=12 batch=2 steps=20   # global batch 24, split over 2, 3 or 4 ranks

# Each variant is rank_driver's words after STEPS; none is plain synchronised SGD.
for variant in "" nosync copy_grads "nosync copy_grads" set_to_none "nosync set_to_none"; do
  read -r -a extra <<<"$variant"
  mode=${variant// /+}; mode=${mode:-sync}
  mkdir -p "$T/ref_$mode"
  env -u RANK -u WORLD_SIZE "$RANK_DRIVER" train "$T/ref_$mode" $total $batch $steps "${extra[@]}"
  for w in 2 3 4; do
    d="$T/ddp_${mode}_$w"; mkdir -p "$d"
    "$DDPRUN" --nproc_per_node=$w "$RANK_DRIVER" train "$d" $total $batch $steps "${extra[@]}"
    "$RANK_DRIVER" compare "$T/ref_$mode/params.0" "$d/params.0" 1e-5 \
      || fail "$mode, world size $w: parameters differ from the single process"
    for r in $(seq 1 $((w - 1))); do
      cmp -s "$d/params.0" "$d/params.$r" || fail "$mode, world size $w: rank $r differs from rank 0"
    done
    ok "$mode, world size $w: same as one process with the whole batch; ranks bit-identical"
  done
done

for how in checkpoint torch_load set_data set_ to_double_and_back; do
  for view in "" copy_grads; do
    d="$T/replace_${how}_$view"; mkdir -p "$d"
    "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" train "$d" $total $batch $steps replace=$how $view
    "$RANK_DRIVER" compare "$T/ref_sync/params.0" "$d/params.0" 1e-5 \
      || fail "parameters replaced by $how ${view:+($view)}: training differs from the single process"
    cmp -s "$d/params.0" "$d/params.1" || fail "parameters replaced by $how ${view:+($view)}: ranks differ"
  done
  ok "parameters replaced by $how halfway: still averaged (same as one process; ranks bit-identical)"
done

mkdir "$T/to_double"
set +e
"$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" train "$T/to_double" $total $batch $steps replace=to_double \
  >"$T/to_double.out" 2>&1
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "a model converted to double after the wrapper was constructed trained on"
expect_in "$T/to_double.out" "DistributedDataParallel on rank [01]: parameter a\.weight became Double"
ok "model converted to double after the wrapper: refused ($(grep -m1 -o 'parameter a.weight became[^;]*' "$T/to_double.out"))"
