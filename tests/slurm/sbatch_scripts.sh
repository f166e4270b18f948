#!/usr/bin/env bash
# scripts/sbatch/*.sbatch start one ddprun per node with the intended command line. A stand-in
# for ddprun prints what it was given and what SLURM gave its node.
source "$(dirname "$0")/lib.sh"
need_cluster
sbatch_dir=$DDPRUN_SOURCE_DIR/scripts/sbatch

cat > fake-ddprun <<'FAKE'
#!/bin/bash
echo "ddprun host=$(hostname) nodeid=$SLURM_NODEID tasks=$SLURM_STEP_NUM_TASKS cpus=${SLURM_CPUS_PER_TASK-none} gpus=${SLURM_GPUS_ON_NODE-none} cuda=${CUDA_VISIBLE_DEVICES-none} args=$*"
FAKE
chmod +x fake-ddprun
export DDPRUN=$W/fake-ddprun TRAIN=train

gpu=$(submit --gpus-per-node=2 --cpus-per-task=2 -o gpu.out "$sbatch_dir/gpu.sbatch" --epochs 3)
cpu=$(submit --cpus-per-task=2 -o cpu.out "$sbatch_dir/cpu.sbatch" --epochs 3)
pre=$(submit --cpus-per-task=2 -o pre.out "$sbatch_dir/preemptible.sbatch" --epochs 3)
wait_job 90 "$gpu" COMPLETED
wait_job 90 "$cpu" COMPLETED
wait_job 90 "$pre" COMPLETED

for n in 1 2; do
  id=$((n - 1))
  expect_line gpu.out "^ddprun host=n$n nodeid=$id tasks=2 cpus=2 gpus=2 cuda=0,1 args=--nproc_per_node=gpu train --device cuda --epochs 3$"
  expect_line cpu.out "^ddprun host=n$n nodeid=$id tasks=2 cpus=2 gpus=none cuda=none args=--nproc_per_node=2 train --device cpu --epochs 3$"
  expect_line pre.out "^ddprun host=n$n nodeid=$id tasks=2 cpus=2 gpus=none cuda=none args=--nproc_per_node=2 train --device cpu --checkpoint-dir $W/checkpoints/ddprun-preemptible --epochs 3$"
done
expect_line pre.out "^ddprun-preemptible: job $pre run 1, checkpoints in $W/checkpoints/ddprun-preemptible$"
[[ $(job_field "$pre" Requeue) == 1 ]] || fail "preemptible.sbatch: the job is not requeueable"
echo "PASS: gpu.sbatch, cpu.sbatch and preemptible.sbatch start one ddprun per node as intended"
