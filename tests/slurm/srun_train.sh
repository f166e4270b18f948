#!/usr/bin/env bash
# The other SLURM style, without ddprun: srun starts every worker, and the worker library takes
# its rank, world size and MASTER_ADDR/PORT from SLURM's variables.
source "$(dirname "$0")/lib.sh"
need_cluster
: "${TRAIN:?}"

job=$(submit -N2 --ntasks-per-node=2 --cpus-per-task=1 -o job.out \
  --wrap "srun $TRAIN --epochs 1 --samples 512 --val-samples 128")
wait_job 280 "$job" COMPLETED
expect_line job.out "train: world size 4 \(gloo\)"
expect_line job.out "done: parameter checksum"
echo "PASS: job $job trained with 4 workers started by srun alone"
