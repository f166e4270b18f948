#!/usr/bin/env bash
# scripts/sbatch/cpu.sbatch runs the example train under ddprun on 2 nodes x 2 workers to the end.
source "$(dirname "$0")/lib.sh"
need_cluster
: "${DDPRUN:?}" "${TRAIN:?}"
export NPROC_PER_NODE=2

job=$(submit --cpus-per-task=2 -o job.out "$DDPRUN_SOURCE_DIR/scripts/sbatch/cpu.sbatch" --epochs 1)
wait_job 280 "$job" COMPLETED
expect_line job.out "ddprun: SLURM job $job step 0: 2 nodes, node rank 0, "
expect_line job.out "ddprun: SLURM job $job step 0: 2 nodes, node rank 1, "
echo "PASS: job $job trained on 2 nodes x 2 workers"
