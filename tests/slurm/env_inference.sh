#!/usr/bin/env bash
# infer_from_slurm and worker_identity_from_slurm on real SLURM environments: the probe runs in
# a 2-node job's batch script and in several srun steps, and prints what they make of it.
source "$(dirname "$0")/lib.sh"
need_cluster
: "${SLURM_ENV_PROBE:?}"

cat > job.sh <<JOB
#!/bin/bash
echo "== batch"; $SLURM_ENV_PROBE
echo "== one per node"; srun --ntasks-per-node=1 --gpus-per-node=2 $SLURM_ENV_PROBE
echo "== three tasks"; srun -n3 --overcommit $SLURM_ENV_PROBE
echo "== on n2 only"; srun -N1 -n1 -w n2 $SLURM_ENV_PROBE
JOB
job=$(submit -N2 --ntasks-per-node=1 --gpus-per-node=2 -o job.out job.sh)
wait_job 90 "$job" COMPLETED
port=$((15000 + job % 10000))
section() { sed -n "/^== $1\$/,/^==/p" job.out | grep -v '^=='; }

# The batch script runs on n1 only: no node rank, but the endpoint and the run id.
section batch > batch.txt
expect_line batch.txt "^probe host=n1 in_slurm=1 in_step=0 nnodes=- node_rank=- master_addr=n1 run_id=$job gpus=2 layout_error=1 worker=0$"
expect_line batch.txt "^layout_error host=n1: ddprun runs outside srun in SLURM job $job of 2 nodes"

# The pattern ddprun is made for: one task per node.
section "one per node" > one.txt
expect_line one.txt "^probe host=n1 in_slurm=1 in_step=1 nnodes=2 node_rank=0 master_addr=n1 run_id=$job.0 gpus=2 layout_error=0 worker=1 rank=0 local_rank=0 world_size=2 local_world_size=1 group_rank=0 group_world_size=2 master=n1:$port run=$job.0$"
expect_line one.txt "^probe host=n2 in_slurm=1 in_step=1 nnodes=2 node_rank=1 master_addr=n1 run_id=$job.0 gpus=2 layout_error=0 worker=1 rank=1 local_rank=0 world_size=2 local_world_size=1 group_rank=1 group_world_size=2 master=n1:$port run=$job.0$"
expect_line one.txt "^summary host=n2: ddprun: SLURM job $job step 0: 2 nodes, node rank 1, 2 GPUs on this node, rendezvous at n1:29400, run id $job.0$"

# Three tasks on two nodes (2,1): workers without a launcher; ddprun would refuse.
section "three tasks" > three.txt
[[ $(grep -c '^probe .*layout_error=1 worker=1' three.txt) -eq 3 ]] || fail "expected 3 worker probes with a layout error"
for want in "host=n1 .* rank=0 local_rank=0 world_size=3 local_world_size=2 group_rank=0" \
            "host=n1 .* rank=1 local_rank=1 world_size=3 local_world_size=2 group_rank=0" \
            "host=n2 .* rank=2 local_rank=0 world_size=3 local_world_size=1 group_rank=1"; do
  expect_line three.txt "^probe $want group_world_size=2 master=n1:$port run=$job.1$"
done

# A step on part of the allocation: its own node list, so n2 is the first host.
section "on n2 only" > n2.txt
expect_line n2.txt "^probe host=n2 in_slurm=1 in_step=1 nnodes=1 node_rank=0 master_addr=n2 run_id=$job.2 .* rank=0 local_rank=0 world_size=1 local_world_size=1 group_rank=0 group_world_size=1 master=n2:$port run=$job.2$"
echo "PASS: inference matches SLURM's real environments in job $job"
