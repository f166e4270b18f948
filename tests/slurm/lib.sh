# Sourced by the tests in tests/slurm/ that run jobs on the shared test cluster (CTest fixture
# slurm_cluster, started by scripts/slurm/cluster.sh). Gives each test an empty working folder
# (the current directory, so job outputs land there), `sl` to run SLURM commands on the
# cluster's login host, job submission that cancels the test's jobs on exit, and waits that poll
# for an event with a deadline instead of sleeping a fixed time.
set -euo pipefail

: "${DDPRUN_SOURCE_DIR:?}" "${DDPRUN_SLURM_CLUSTER:?}" "${DDPRUN_SLURM_WORK:?}"
readonly CLUSTER_SH=$DDPRUN_SOURCE_DIR/scripts/slurm/cluster.sh
readonly SKIP_CODE=${DDPRUN_SKIP_CODE:-77}
readonly TEST_NAME=$(basename "$0" .sh)
readonly W=$DDPRUN_SLURM_WORK/$TEST_NAME
rm -rf "$W"
mkdir -p "$W"
cd "$W"

# Runs a SLURM command (sbatch, squeue, scontrol, ...) on the cluster's login host.
sl() { "$CLUSTER_SH" run "$DDPRUN_SLURM_CLUSTER" "$@"; }

show_outputs() {
  local f
  for f in "$W"/*.out; do
    [[ -e $f ]] || continue
    echo "----- $f" >&2
    tail -n 60 "$f" >&2
  done
}

fail() {
  echo "FAIL: $*" >&2
  show_outputs
  exit 1
}

# Skips (exit 77) when the fixture could not start a cluster on this machine.
need_cluster() {
  if [[ -r $DDPRUN_SLURM_CLUSTER/skip-reason ]]; then
    echo "SKIP: no SLURM test cluster: $(cat "$DDPRUN_SLURM_CLUSTER/skip-reason")"
    exit "$SKIP_CODE"
  fi
  [[ -r $DDPRUN_SLURM_CLUSTER/nodes ]] \
    || fail "the test cluster in $DDPRUN_SLURM_CLUSTER is not up (did slurm_cluster_up run?)"
}

cancel_my_jobs() {
  local id
  [[ -r $W/.jobs ]] || return 0
  while read -r id; do sl scancel "$id" 2>/dev/null || true; done < "$W/.jobs"
}
trap cancel_my_jobs EXIT

# sbatch ARGS...; prints the job id.
submit() {
  local out
  out=$(sl sbatch --parsable "$@") || fail "sbatch $* failed"
  echo "${out%%;*}" | tee -a "$W/.jobs"
}

# One field of `scontrol show job` (finished jobs stay visible for MinJobAge, 300 s).
job_field() { sl scontrol -o show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# wait_until SECONDS WHAT COMMAND...: polls COMMAND until it succeeds; fails naming WHAT.
wait_until() {
  local timeout=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for $what"
    sleep 0.1
  done
}

# wait_running SECONDS JOB WHAT COMMAND...: as wait_until, but fails at once if JOB ends first.
wait_running() {
  local timeout=$1 job=$2 what=$3 deadline
  shift 3
  deadline=$((SECONDS + timeout))
  until "$@"; do
    # The condition may have come true just before the job ended (its last task wrote its file
    # and exited between the two checks): asked again once the job has ended.
    if job_ended "$job"; then
      "$@" && break
      fail "job $job ended ($(job_field "$job" JobState)) before $what"
    fi
    ((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for $what"
    sleep 0.1
  done
}

job_ended() {
  case $(job_field "$1" JobState) in
    PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED | SUSPENDED | RESIZING | "") return 1 ;;
    *) return 0 ;;
  esac
}

# wait_job SECONDS JOB STATE: waits until JOB has ended and checks its final state.
wait_job() {
  local timeout=$1 job=$2 want=$3 state
  wait_until "$timeout" "job $job to end" job_ended "$job"
  state=$(job_field "$job" JobState)
  [[ $state == "$want" ]] || fail "job $job ended $state (exit $(job_field "$job" ExitCode)), expected $want"
}

# count_files GLOB: how many files match.
count_files() { compgen -G "$1" | wc -l; }
have_files() { [[ $(count_files "$1") -ge $2 ]]; }

# expect_line FILE REGEX: FILE has a line matching REGEX (grep -E).
expect_line() { grep -Eq -- "$2" "$1" || fail "no line matching /$2/ in $1"; }
