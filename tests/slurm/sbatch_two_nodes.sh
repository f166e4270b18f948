#!/usr/bin/env bash
# The harness works: an sbatch job on 2 nodes runs a command on each through srun, and every
# task sees the SLURM variables of its node (hostname, ids, node list, fake GPUs).
source "$(dirname "$0")/lib.sh"
need_cluster

cat > job.sh <<'JOB'
#!/bin/bash
echo "batch host=$(hostname)"
srun --ntasks-per-node=1 bash -c 'echo "task host=$(hostname) job=$SLURM_JOB_ID step=$SLURM_STEP_ID procid=$SLURM_PROCID nodeid=$SLURM_NODEID nodes=$SLURM_STEP_NUM_NODES nodelist=$SLURM_STEP_NODELIST gpus=${SLURM_GPUS_ON_NODE-none} cuda=${CUDA_VISIBLE_DEVICES-none}"'
JOB
job=$(submit -N2 --ntasks-per-node=1 --gpus-per-node=2 -o job.out job.sh)
wait_job 90 "$job" COMPLETED

expect_line job.out "^batch host=n1$"
[[ $(grep -c '^task ' job.out) -eq 2 ]] || fail "expected 2 task lines"
expect_line job.out "^task host=n1 job=$job step=0 procid=0 nodeid=0 nodes=2 nodelist=n\[1-2\] gpus=2 cuda=0,1$"
expect_line job.out "^task host=n2 job=$job step=0 procid=1 nodeid=1 nodes=2 nodelist=n\[1-2\] gpus=2 cuda=0,1$"
echo "PASS: job $job ran on n1 and n2 with the expected SLURM variables"
