#!/usr/bin/env bash
# The worker library on GPUs, one MODE per CTest entry (label gpu). Each skips, with its reason,
# where this build's libtorch has no CUDA or too few GPUs are visible: never passes without
# having run.
#   nccl_solo         an NCCL process group of one rank: every collective, checked on the GPU
#                     (and on 2 ranks when there are 2 GPUs)
#   train             train --device cuda alone, and under ddprun --nproc_per_node=gpu
#   ddp_vs_cpu        DDP on CUDA (NCCL with 2 GPUs, else 2 ranks sharing one through gloo) ends
#                     within 1e-4 of one process training on the CPU; train --device cuda within
#                     1e-3 of train --device cpu (saved parameters)
#   gloo_shared_gpu   2 ranks on one GPU, gloo on CUDA tensors: same as one process on the CPU
#   nccl_hang         2 GPUs, rank 1 never joins a barrier: CommError within the 5 s timeout
#   cuda_unavailable  (not a GPU test) without a GPU, train --device cuda exits 1 with one line
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
mode=${1:?mode}
read -r gpus build < <("$RANK_DRIVER" cuda_devices)
why() {
  if [[ $build == cpu-build ]]; then echo "this libtorch was built without CUDA"; else echo "$gpus GPU(s) visible"; fi
}
need_gpus() { (( gpus >= $1 )) || skip "needs $1 GPU(s): $(why)"; }
# max |a-b| over two train --save-params files ("name v1 v2 ..." per line) within $3
close_params() {
  awk -v tol="$3" 'NR == FNR { for (i = 2; i <= NF; i++) a[FNR, i] = $i; next }
    { for (i = 2; i <= NF; i++) { d = a[FNR, i] - $i; if (d < 0) d = -d; if (d > m) m = d } }
    END { print "max |difference|: " m; exit !(m <= tol) }' "$1" "$2"
}
train_args=(--epochs 2 --samples 512 --val-samples 128)

case $mode in
  nccl_solo)
    need_gpus 1
    env -u RANK -u WORLD_SIZE "$RANK_DRIVER" collectives "$T" cuda nccl
    expect_eq "$(cat "$T/collectives.0")" "nccl 1" "backend and world size"
    ok "NCCL, world size 1: all_reduce sum/min/max, reduce_mean, broadcast, all_gather, barrier on the GPU"
    if (( gpus >= 2 )); then
      rm -f "$T"/collectives.*
      "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" collectives "$T" cuda nccl
      for r in 0 1; do expect_eq "$(cat "$T/collectives.$r")" "nccl 2" "rank $r"; done
      ok "NCCL, 2 ranks on 2 GPUs: every collective"
    fi
    ;;
  train)
    need_gpus 1
    "$TRAIN" --device cuda "${train_args[@]}" >"$T/alone.out" 2>&1 || { cat "$T/alone.out"; fail "train --device cuda alone"; }
    expect_in "$T/alone.out" "world size 1 .*cuda"
    expect_in "$T/alone.out" "done: parameter checksum"
    "$DDPRUN" --nproc_per_node=gpu "$TRAIN" --device cuda "${train_args[@]}" >"$T/ddprun.out" 2>&1 \
      || { cat "$T/ddprun.out"; fail "train --device cuda under ddprun --nproc_per_node=gpu"; }
    expect_in "$T/ddprun.out" "world size $gpus "
    expect_in "$T/ddprun.out" "done: parameter checksum"
    ok "train --device cuda alone and under ddprun --nproc_per_node=gpu ($gpus GPU(s))"
    ;;
  ddp_vs_cpu)
    need_gpus 1
    variant=cuda_gloo; (( gpus >= 2 )) && variant=cuda
    mkdir -p "$T/cpu" "$T/gpu"
    env -u RANK -u WORLD_SIZE "$RANK_DRIVER" train "$T/cpu" 12 2 20
    "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" train "$T/gpu" 12 2 20 $variant
    "$RANK_DRIVER" compare "$T/cpu/params.0" "$T/gpu/params.0" 1e-4 || fail "DDP on CUDA ($variant) differs from CPU training"
    cmp -s "$T/gpu/params.0" "$T/gpu/params.1" || fail "DDP on CUDA: ranks differ"
    "$TRAIN" --device cpu "${train_args[@]}" --save-params "$T/cpu.txt" >/dev/null
    "$TRAIN" --device cuda "${train_args[@]}" --save-params "$T/cuda.txt" >/dev/null
    close_params "$T/cpu.txt" "$T/cuda.txt" 1e-3 || fail "train --device cuda differs from --device cpu by more than 1e-3"
    ok "DDP on CUDA ($variant, 2 ranks) within 1e-4 of CPU training; train on CUDA within 1e-3 of CPU"
    ;;
  gloo_shared_gpu)
    need_gpus 1
    mkdir -p "$T/cpu" "$T/gpu"
    env -u RANK -u WORLD_SIZE "$RANK_DRIVER" train "$T/cpu" 12 2 20
    "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" train "$T/gpu" 12 2 20 cuda_gloo
    "$RANK_DRIVER" compare "$T/cpu/params.0" "$T/gpu/params.0" 1e-4 || fail "gloo on a shared GPU differs from CPU training"
    cmp -s "$T/gpu/params.0" "$T/gpu/params.1" || fail "gloo on a shared GPU: ranks differ"
    ok "2 ranks sharing GPU 0 through gloo: same as one process on the CPU; ranks bit-identical"
    ;;
  nccl_hang)
    need_gpus 2
    mkdir "$T/hang"
    DDPRUN_COLLECTIVE_TIMEOUT=5 "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" peer_hangs "$T/hang" cuda nccl \
      >"$T/hang.out" 2>&1 || { cat "$T/hang.out"; fail "peer_hangs on NCCL"; }
    expect_in "$T/hang/result" "^CommError: .*barrier"
    seconds=$(sed -n 's/^seconds //p' "$T/hang/result")
    awk -v s="$seconds" 'BEGIN { exit !(s >= 4 && s < 60) }' || fail "stuck NCCL barrier reported after ${seconds}s"
    ok "stuck NCCL collective: CommError after ${seconds}s (timeout 5 s)"
    ;;
  cuda_unavailable)
    (( gpus == 0 )) || skip "a GPU is visible; this checks the error without one"
    set +e
    "$TRAIN" --device cuda "${train_args[@]}" >"$T/out" 2>"$T/err"
    rc=$?
    set -e
    expect_eq "$rc" 1 "exit code of train --device cuda without a GPU"
    expect_eq "$(wc -l < "$T/err")" 1 "lines on stderr"
    expect_in "$T/err" "^ddprun::ProcessGroupError: device cuda was requested but this libtorch was built without CUDA or no GPU is visible"
    ok "train --device cuda without a GPU ($(why)): $(cat "$T/err")"
    ;;
  *) fail "unknown mode $mode" ;;
esac
