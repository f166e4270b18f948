#!/usr/bin/env bash
# scripts/sbatch/preemptible.sbatch with ddprun: SIGUSR1 makes the workers checkpoint and go
# on; `scontrol requeue` (what preemption does) stops the job and runs it again under the same
# id; the rerun resumes from the checkpoint and completes. The trainer is tests/slurm/fake_train.sh,
# which checkpoints as the example train does, in a known number of steps.
source "$(dirname "$0")/lib.sh"
need_cluster
: "${DDPRUN:?}"
export TRAIN=$DDPRUN_TESTS_DIR/slurm/fake_train.sh NPROC_PER_NODE=2
ckpt=$W/checkpoints/ddprun-preemptible

job=$(submit --cpus-per-task=2 -o job.out "$DDPRUN_SOURCE_DIR/scripts/sbatch/preemptible.sbatch" --steps 300)
step_at_least() { [[ -r $ckpt/step && $(cat "$ckpt/step") -ge $1 ]]; }
wait_running 120 "$job" "the first checkpoint" step_at_least 10

sl scancel --signal=USR1 "$job"
wait_running 60 "$job" "SIGUSR1 to reach the 4 workers" have_files "$ckpt/usr1-run0-rank*" 4
[[ $(job_field "$job" JobState) == RUNNING ]] || fail "SIGUSR1 ended the job: $(job_field "$job" JobState)"
saved=$(cat "$ckpt/step")

sl scontrol requeue "$job"
requeued() { [[ $(job_field "$job" Restarts) == 1 && $(job_field "$job" JobState) == PENDING ]]; }
wait_until 60 "the job to be requeued" requeued
sl scontrol update JobId="$job" StartTime=now  # SLURM holds a requeued job back for a while
wait_job 150 "$job" COMPLETED

expect_line job.out "^ddprun-preemptible: job $job run 1, "
expect_line job.out "^ddprun-preemptible: job $job run 2, "
resumed=$(sed -n 's/.*fake_train rank 0 run 1: starting at step \([0-9]*\)$/\1/p' job.out)
[[ -n $resumed ]] || fail "the rerun did not start"
((resumed >= saved)) || fail "the rerun started at step $resumed, before the checkpoint at $saved"
[[ $(grep -c "fake_train rank [0-3] run 1: finished 300 steps" job.out) -eq 4 ]] || fail "the rerun did not finish on all 4 ranks"
echo "PASS: job $job checkpointed at step $saved on SIGUSR1, was requeued and resumed at step $resumed"
