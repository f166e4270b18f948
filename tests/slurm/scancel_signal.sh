#!/usr/bin/env bash
# `scancel --signal=USR1 JOB` reaches every task of the job's step (on both nodes), and not the
# batch shell, which would die of it: the job still completes.
source "$(dirname "$0")/lib.sh"
need_cluster

cat > task.sh <<'TASK'
#!/bin/bash
tag=$(hostname)-$SLURM_PROCID
trap 'echo "$tag" > "got-$tag"' USR1
echo "$tag" > "ready-$tag"
deadline=$((SECONDS + 120))
until [[ -e got-$tag ]]; do
  ((SECONDS < deadline)) || { echo "$tag: no SIGUSR1 after 120 s"; exit 1; }
  sleep 0.1 & wait $! || true
done
TASK
chmod +x task.sh
job=$(submit -N2 --ntasks-per-node=2 -o job.out --wrap "srun $W/task.sh")
wait_running 90 "$job" "4 tasks to be ready" have_files "ready-*" 4
sl scancel --signal=USR1 "$job"
wait_running 60 "$job" "SIGUSR1 to reach 4 tasks" have_files "got-*" 4
wait_job 60 "$job" COMPLETED
for f in got-n1-0 got-n1-1 got-n2-2 got-n2-3; do [[ -e $f ]] || fail "missing $f"; done
echo "PASS: SIGUSR1 reached all 4 tasks of job $job; the job completed"
