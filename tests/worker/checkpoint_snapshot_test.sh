#!/usr/bin/env bash
# The library's Checkpointer given no folder (checkpoint.hpp, default_checkpoint_dir()) writes to
# DDPRUN_SNAPSHOT_DIR under ddprun, and train --snapshots, SIGKILLed on rank 1 in its third epoch,
# restarts and resumes from that folder after epoch 2 (the last checkpoint committed), every rank
# ending with the parameters of an uninterrupted run, bit for bit. Started alone, the same
# program writes to ./checkpoints.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
: "${TRAIN:?}"
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then parent=/dev/shm; else parent=${TMPDIR:-/tmp}; fi
id="checkpoint-snapshot-$(basename "$T")"
folder=$parent/ddprun-snapshots.$(id -u).$id
trap 'rc=$?; rm -rf "$folder"; cleanup $rc' EXIT
args=(--epochs 3 --samples 1024 --val-samples 256)  # 16 steps an epoch on each of 2 ranks

"$DDPRUN" --nproc_per_node=2 --rdzv_id="$id-reference" "$TRAIN" "${args[@]}" --snapshots --save-params "$T/reference.params" \
  >"$T/reference.out" 2>&1 || { cat "$T/reference.out"; fail "the uninterrupted run"; }
"$DDPRUN" --nproc_per_node=2 --max_restarts=1 --restart_backoff_max=0 --snapshot_keep --rdzv_id="$id" "$TRAIN" "${args[@]}" \
  --snapshots --save-params "$T/killed.params" --crash-at-step 40 --crash-rank 1 --crash-with-sigkill \
  >"$T/killed.out" 2>&1 || { cat "$T/killed.out"; fail "the killed run"; }
expect_in "$T/killed.out" "train: SIGKILL at step 40 on rank 1"
expect_in "$T/killed.out" "rank 1 \(local rank 1\) failed: .*SIGKILL"
expect_eq "$(grep -c "train: checkpoints in $folder\$" "$T/killed.out")" 2 "lines naming DDPRUN_SNAPSHOT_DIR as the checkpoints' folder (one an attempt)"
expect_in "$T/killed.out" "resumed from the checkpoint after epoch 2 \(attempt 1;"
cmp -s "$T/reference.params" "$T/killed.params" || fail "the resumed run ends with other parameters than the uninterrupted one"
expect_eq "$(cd "$folder" && ls)" "$(printf 'checkpoint-000000002.pt\ncheckpoint-000000003.pt')" "the kept folder (keep_last 2)"
ok "train --snapshots: SIGKILL of rank 1 at step 40, restart, resumed from DDPRUN_SNAPSHOT_DIR after epoch 2, the uninterrupted run's parameters bit for bit"

# Started alone (no DDPRUN_SNAPSHOT_DIR): ./checkpoints.
(cd "$T" && env -u DDPRUN_SNAPSHOT_DIR "$TRAIN" --epochs 1 --samples 64 --val-samples 32 --snapshots >"$T/alone.out" 2>&1) \
  || { cat "$T/alone.out"; fail "train --snapshots alone"; }
expect_in "$T/alone.out" "train: checkpoints in checkpoints$"
[[ -f $T/checkpoints/checkpoint-000000001.pt ]] || fail "train --snapshots alone wrote no ./checkpoints/checkpoint-000000001.pt"
ok "train --snapshots started alone: ./checkpoints"
wait_for 10 no_leftovers
