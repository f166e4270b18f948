#!/usr/bin/env bash
# A worker crash inside a 2-node SLURM job restarts the whole job: rank 3 (on n2) fails in the
# first attempt while every rank is running; ddprun on both nodes stops its workers and starts
# all 4 again with TORCHELASTIC_RESTART_COUNT=1, and the job completes.
source "$(dirname "$0")/lib.sh"
need_cluster
: "${DDPRUN:?}"
export PROBE_DIR=$W/probe PROBE_HOLD=1 PROBE_CRASH_RANK=3

cat > job.sh <<JOB
#!/bin/bash
srun --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 --max_restarts=1 "$DDPRUN_TESTS_DIR/slurm/probe_worker.sh"
JOB
job=$(submit -N2 --ntasks-per-node=1 -o job.out job.sh)
wait_job 150 "$job" COMPLETED

for rank in 0 1 2 3; do
  [[ -r $PROBE_DIR/attempt0/rank$rank.env ]] || fail "rank $rank did not run in the first attempt"
  [[ ! -e $PROBE_DIR/attempt0/rank$rank.done ]] || fail "rank $rank finished the first attempt instead of being stopped"
  f=$PROBE_DIR/attempt1/rank$rank.env
  [[ -r $f ]] || fail "rank $rank was not restarted (no $f)"
  grep -qx "TORCHELASTIC_RESTART_COUNT=1" "$f" || fail "rank $rank: restart count is not 1 in $f"
  grep -qx "RANK=$rank" "$f" && grep -qx "WORLD_SIZE=4" "$f" || fail "rank $rank: wrong rank or world size in $f"
  [[ -e $PROBE_DIR/attempt1/rank$rank.done ]] || fail "rank $rank did not finish the second attempt"
done
[[ ! -e $PROBE_DIR/attempt2 ]] || fail "a third attempt ran"
echo "PASS: job $job: the crash of rank 3 on n2 restarted all 4 workers on both nodes once"
