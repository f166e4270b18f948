#!/usr/bin/env bash
# `scancel --signal=USR1 JOB` during `srun ddprun` on 2 nodes: every worker gets SIGUSR1 and
# keeps running (ddprun does not stop the job for it), then finishes; the job completes.
source "$(dirname "$0")/lib.sh"
need_cluster
: "${DDPRUN:?}"
export PROBE_DIR=$W/probe PROBE_WAIT_USR1=1

cat > job.sh <<JOB
#!/bin/bash
srun --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 "$DDPRUN_TESTS_DIR/slurm/probe_worker.sh"
JOB
job=$(submit -N2 --ntasks-per-node=1 -o job.out job.sh)
wait_running 120 "$job" "4 workers to be ready" have_files "$PROBE_DIR/attempt0/rank*.ready" 4
sl scancel --signal=USR1 "$job"
wait_job 120 "$job" COMPLETED
for rank in 0 1 2 3; do
  [[ -s $PROBE_DIR/attempt0/rank$rank.usr1 ]] || fail "rank $rank never got SIGUSR1"
  [[ -e $PROBE_DIR/attempt0/rank$rank.done ]] || fail "rank $rank did not finish"
done
[[ ! -e $PROBE_DIR/attempt1 ]] || fail "SIGUSR1 restarted the workers"
echo "PASS: job $job: SIGUSR1 reached all 4 workers under ddprun; they finished"
