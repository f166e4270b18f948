#!/usr/bin/env bash
# `srun --ntasks-per-node=1 ddprun --nproc_per_node=2 PROGRAM` in a 2-node sbatch job, with no
# other flag: ddprun takes the node count, its node rank, the endpoint and the run id from SLURM,
# prints what it inferred, and the 4 workers get contiguous ranks per node and one world.
source "$(dirname "$0")/lib.sh"
need_cluster
: "${DDPRUN:?}"
export PROBE_DIR=$W/probe

cat > job.sh <<JOB
#!/bin/bash
srun --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 "$DDPRUN_TESTS_DIR/slurm/probe_worker.sh"
JOB
job=$(submit -N2 --ntasks-per-node=1 -o job.out job.sh)
wait_job 120 "$job" COMPLETED

expect_line job.out "ddprun: SLURM job $job step 0: 2 nodes, node rank 0, .*rendezvous at n1:[0-9]+, run id $job\.0"
expect_line job.out "ddprun: SLURM job $job step 0: 2 nodes, node rank 1, .*rendezvous at n1:[0-9]+, run id $job\.0"
# No secret was given: the nodes authenticate each other with the cluster's MUNGE, found through
# slurm.conf's AuthInfo socket (this cluster's munged is not at the default path).
munge_lines=$(grep -c "ddprun: the rendezvous is authenticated with MUNGE (SLURM job $job, run $job\.0)" job.out || true)
[[ $munge_lines -eq 2 ]] || fail "expected both nodes to authenticate with MUNGE, $munge_lines did: $(cat job.out)"
! grep -q "rendezvous is open" job.out || fail "a node's rendezvous is open: $(grep "rendezvous is open" job.out)"
ports=()
for rank in 0 1 2 3; do
  f=$PROBE_DIR/attempt0/rank$rank.env
  [[ -r $f ]] || fail "rank $rank did not run (no $f)"
  node=$((rank / 2))
  for want in "HOST=n$((node + 1))" "RANK=$rank" "LOCAL_RANK=$((rank % 2))" "GROUP_RANK=$node" \
              "SLURM_NODEID=$node" "WORLD_SIZE=4" "LOCAL_WORLD_SIZE=2" "GROUP_WORLD_SIZE=2" \
              "TORCHELASTIC_RUN_ID=$job.0" "TORCHELASTIC_RESTART_COUNT=0"; do
    grep -qx "$want" "$f" || fail "rank $rank: expected $want in $f: $(tr '\n' ' ' < "$f")"
  done
  grep -Eqx 'MASTER_ADDR=(n1|127\.1\.0\.1)' "$f" || fail "rank $rank: MASTER_ADDR is not n1: $(grep MASTER_ADDR "$f")"
  ports+=("$(sed -n 's/^MASTER_PORT=//p' "$f")")
done
[[ $(printf '%s\n' "${ports[@]}" | sort -u | wc -l) -eq 1 && -n ${ports[0]} ]] \
  || fail "the ranks disagree on MASTER_PORT: ${ports[*]}"
echo "PASS: job $job: 2 nodes x 2 workers, ranks 0..3 by node, one world of 4, authenticated with MUNGE"
