#!/usr/bin/env bash
# A stand-in for the example train with its checkpoint behaviour, fast and deterministic:
#   fake_train.sh --device DEV --checkpoint-dir DIR --steps N
# counts steps of 0.1 s from the step saved in DIR/step up to N. Rank 0 saves the step reached
# every 10 steps and when SIGUSR1 arrives; every rank records a SIGUSR1 in
# DIR/usr1-run<R>-rank<RANK> and keeps going (R: SLURM_RESTART_COUNT, 0 on the first run).
set -euo pipefail
: "${RANK:?}"
steps=100 ckpt=""
while (($#)); do
  case $1 in
    --checkpoint-dir) ckpt=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --device) shift 2 ;;
    *) echo "fake_train: unknown argument $1" >&2; exit 64 ;;
  esac
done
[[ -n $ckpt ]] || { echo "fake_train: --checkpoint-dir is required" >&2; exit 64; }
run=${SLURM_RESTART_COUNT:-0}
save() { if ((RANK == 0)); then echo "$1" > "$ckpt/step.tmp"; mv "$ckpt/step.tmp" "$ckpt/step"; fi; }
usr1=0
trap 'usr1=1' USR1

start=$(cat "$ckpt/step" 2>/dev/null || echo 0)
echo "fake_train rank $RANK run $run: starting at step $start"
for ((step = start; step < steps; step++)); do
  sleep 0.1 & wait $! || true
  if ((usr1)); then
    usr1=0
    save "$step"
    touch "$ckpt/usr1-run$run-rank$RANK"
    echo "fake_train rank $RANK run $run: SIGUSR1 at step $step, checkpoint saved"
  fi
  if ((step % 10 == 0)); then save "$step"; fi
done
save "$steps"
echo "fake_train rank $RANK run $run: finished $steps steps"
