#!/usr/bin/env bash
# Under ddprun, a worker crash restarts the job and train resumes from its checkpoint to the
# same final parameters as an uninterrupted run. The same train also runs under torchrun,
# whose workers use the agent's store: Debian's for the 1.13 build, the venv's for the 2.x one
# (TORCH_PYTHON; a 2.x worker cannot use a 1.13 agent's store).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
: "${TRAIN:?}"
args=(--epochs 3 --samples 1024 --val-samples 256)

"$DDPRUN" --nproc_per_node=2 "$TRAIN" "${args[@]}" --checkpoint-dir "$T/ck_a" --save-params "$T/a.pt" \
  >"$T/a.out" 2>&1 || { cat "$T/a.out"; fail "uninterrupted run"; }
"$DDPRUN" --nproc_per_node=2 --max_restarts=1 "$TRAIN" "${args[@]}" --checkpoint-dir "$T/ck_b" \
  --save-params "$T/b.pt" --crash-at-step 40 --crash-rank 1 >"$T/b.out" 2>&1 || { cat "$T/b.out"; fail "crashed run"; }
expect_in "$T/b.out" "injected crash at step 40 on rank 1"
expect_in "$T/b.out" "restarting workers \(restart 1 of 1\)"
expect_in "$T/b.out" "resumed from the checkpoint"
sum_a=$(sed -n 's/.*parameter checksum //p' "$T/a.out")
sum_b=$(sed -n 's/.*parameter checksum //p' "$T/b.out")
[[ -n "$sum_a" ]] || fail "no checksum printed"
expect_eq "$sum_b" "$sum_a" "final parameters after crash, restart and resume"
cmp -s "$T/a.pt" "$T/b.pt" || fail "saved parameters differ"
ok "crash -> restart -> resume: same final parameters ($sum_a)"

if "$TORCH_PYTHON" -c 'import torch.distributed.run' 2>/dev/null; then
  port=$(free_tcp_port)
  (cd "$T" && DDPRUN_STORE_TIMEOUT=60 "$TORCH_PYTHON" -m torch.distributed.run --nproc_per_node=2 --master_port="$port" \
    --redirects 9:1 --tee 9:1 --log_dir "$T/tlogs" --no_python "$TRAIN" "${args[@]}" --save-params "$T/c.pt") \
    >"$T/c.out" 2>&1 || { cat "$T/c.out"; fail "train under torchrun"; }
  cmp -s "$T/a.pt" "$T/c.pt" || fail "train under torchrun ended with other parameters"
  ok "train under torchrun $("$TORCH_PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) (agent store): same final parameters"
else
  echo "not run: train under torchrun ($TORCH_PYTHON has no torch)"
fi
