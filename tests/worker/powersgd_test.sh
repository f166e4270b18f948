#!/usr/bin/env bash
# PowerSGD against PyTorch itself (issue 18): the same model, weights, batches and buckets
# through Python DDP with PyTorch's powerSGD_hook (tests/worker/powersgd_reference.py,
# TORCH_PYTHON, whose libtorch is the one built against) and through the C++ wrapper with
# ddprun::powerSGD_hook (powersgd_driver), 2 gloo ranks, 8 steps. The hook does PyTorch's
# operations on the same tensors in the same order (the random Qs from the same seeds), so the
# parameters must be identical (tolerance 0; %.9g round-trips a float), and so must the
# iteration count, the compression statistics and the logged statistics lines.
# The model (powersgd_driver.cpp) has weights of 12×10, 12×12, 12×12 and 2×12 and 1-D biases:
# the 2×12 weight and the biases are not worth compressing at rate 2 and go uncompressed.
# With several buckets the Python side finishes each bucket's hook before the next bucket's
# (PyTorch's hook alone hangs there on gloo; see powersgd_reference.py): the same operations.
# Each setting must also change the result (the comparison would be blind otherwise).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
"$TORCH_PYTHON" -c 'import numpy, torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook' 2>/dev/null \
  || skip "$TORCH_PYTHON has no torch with powerSGD_hook (or no numpy)"
export DDPRUN_COLLECTIVE_TIMEOUT=60
steps=8
limit=240

# NAME CONFIG: compression from iteration start (> 1, so that the first iterations are plain
# averaging); cap: each bucket's cap in bytes (600: three buckets; 0: PyTorch's defaults, one).
configs=(
  "r1_ef_warm rank=1,start=3,rate=2,ef=1,warm=1,eps=0,seed=0,freq=2,batch=0,cap=600"
  "r1_ef_cold rank=1,start=3,rate=2,ef=1,warm=0,eps=0,seed=0,freq=2,batch=0,cap=600"
  "r1_noef    rank=1,start=3,rate=2,ef=0,warm=1,eps=0,seed=0,freq=2,batch=0,cap=600"
  "r2_ef_cold rank=2,start=3,rate=2,ef=1,warm=0,eps=0,seed=7,freq=10000,batch=0,cap=600"
  "r2_plain   rank=2,start=2,rate=2,ef=0,warm=0,eps=0,seed=0,freq=1,batch=0,cap=0"
  "r3_qr      rank=3,start=2,rate=1,ef=1,warm=1,eps=0,seed=0,freq=1,batch=0,cap=0"
  "r1_batched rank=1,start=3,rate=2,ef=1,warm=0,eps=1e-8,seed=3,freq=3,batch=1,cap=0"
  "r1_single  rank=1,start=3,rate=2,ef=1,warm=0,eps=1e-8,seed=3,freq=3,batch=0,cap=0"
  "never      rank=1,start=100,rate=2,ef=1,warm=1,eps=0,seed=0,freq=2,batch=0,cap=600"
)

# job cpp|py NAME CONFIG: one 2-rank job, its output in $T/SIDE_NAME.log.
job() {
  local side=$1 name=$2 config=$3 rc=0
  mkdir -p "$T/${side}_$name"
  if [[ $side == cpp ]]; then
    timeout -k 10 $limit "$DDPRUN" --nproc_per_node=2 "$POWERSGD_DRIVER" "$T/${side}_$name" "$config" $steps \
      >"$T/${side}_$name.log" 2>&1 || rc=$?
  else
    PYTHON_EXEC=$TORCH_PYTHON timeout -k 10 $limit "$DDPRUN" --nproc_per_node=2 \
      "$DDPRUN_TESTS_DIR/worker/powersgd_reference.py" "$T/${side}_$name" "$config" $steps \
      >"$T/${side}_$name.log" 2>&1 || rc=$?
  fi
  (( rc == 0 )) || { cat "$T/${side}_$name.log"; fail "$name: the $side job failed (exit $rc)"; }
}

for entry in "${configs[@]}"; do
  read -r name config <<<"$entry"
  job cpp "$name" "$config"
  job py "$name" "$config"
  for r in 0 1; do
    "$RANK_DRIVER" compare "$T/py_$name/params.$r" "$T/cpp_$name/params.$r" 0 >"$T/compare.log" \
      || { cat "$T/compare.log"; fail "$name, rank $r: C++ differs from PyTorch's powerSGD_hook"; }
    for what in stats log; do
      diff "$T/py_$name/$what.$r" "$T/cpp_$name/$what.$r" >"$T/diff.log" \
        || { cat "$T/diff.log"; fail "$name, rank $r: the $what differ from PyTorch's"; }
    done
  done
  cmp -s "$T/cpp_$name/params.0" "$T/cpp_$name/params.1" || fail "$name: the C++ ranks differ"
  ok "$name ($config): the same parameters, statistics and log lines as PyTorch's, on both ranks"
done
expect_eq "$(head -1 "$T/cpp_r1_ef_warm/stats.0")" "iter $steps" "iterations counted"
[[ -s "$T/cpp_r1_ef_warm/log.0" ]] || fail "no compression statistics were logged"

# Every setting changes the result: compression against none, error feedback, warm start, the
# rank, batching (other random Qs).
differ() {
  ! cmp -s "$T/cpp_$1/params.0" "$T/cpp_$2/params.0" || fail "$1 and $2 gave the same parameters: the test cannot see $3"
}
differ r1_ef_warm never "compression"
differ r1_ef_warm r1_ef_cold "warm start"
differ r1_ef_warm r1_noef "error feedback"
differ r2_ef_cold r1_ef_cold "the rank"
differ r1_batched r1_single "batching"
ok "compression, error feedback, warm start, the rank and batching each change the parameters"
