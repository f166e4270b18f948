#!/usr/bin/env bash
# cluster.sh on its own (a second, one-node cluster beside the shared one): up within a minute,
# a job runs, and down leaves nothing: no daemon, no job process, no namespace, no mount, no
# state folder, /etc/hosts unchanged.
set -euo pipefail
: "${DDPRUN_SOURCE_DIR:?}" "${DDPRUN_SLURM_WORK:?}"
cluster_sh=$DDPRUN_SOURCE_DIR/scripts/slurm/cluster.sh
dir=$(mktemp -d /tmp/ddprun-slurm-lifecycle.XXXXXX)
trap '"$cluster_sh" down "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

hosts_before=$(md5sum < /etc/hosts)
t0=$SECONDS
rc=0
"$cluster_sh" up "$dir" --nodes 1 || rc=$?
if ((rc == 77)); then
  echo "SKIP: $(cat "$dir/skip-reason")"
  exit 77
fi
((rc == 0)) || fail "cluster.sh up exited $rc"
((SECONDS - t0 < 60)) || fail "cluster.sh up took $((SECONDS - t0))s"

[[ $("$cluster_sh" run "$dir" srun -N1 hostname) == n1 ]] || fail "srun hostname did not print n1"
mkdir -p "$DDPRUN_SLURM_WORK/harness_lifecycle"
cd "$DDPRUN_SLURM_WORK/harness_lifecycle"
# Submit once the node is idle again after that srun (it passes through COMPLETING): a job that
# finds it busy waits for slurmctld's next scheduling pass, up to a minute later.
deadline=$((SECONDS + 60))
until [[ $("$cluster_sh" run "$dir" sinfo -h -n n1 -o %T 2>/dev/null) == idle ]]; do
  ((SECONDS < deadline)) || fail "n1 not idle 60 s after srun: $("$cluster_sh" run "$dir" sinfo -h -n n1 -o %T 2>&1)"
  sleep 0.1
done
job=$("$cluster_sh" run "$dir" sbatch --parsable -o /dev/null --wrap "srun sleep 600")

# What must be gone afterwards: munged (outside the namespaces), everything inside them
# (slurmctld, slurmd, the job's slurmstepd and tasks), the mounts.
munged=$(cat "$dir/munge/munged.pid")
munged_start=$(awk '{print $22}' "/proc/$munged/stat")
namespaces=$(for ns in "$dir"/ns/*; do echo "net:[$(stat -L -c %i "$ns")]"; done)
in_namespaces() {
  local p link
  for p in /proc/[0-9]*; do
    link=$(readlink "$p/ns/net" 2>/dev/null) || continue
    state=$(awk '{print $3}' "$p/stat" 2>/dev/null) || continue
    if [[ $state != Z ]] && grep -qxF "$link" <<< "$namespaces"; then cat "$p/comm"; fi
  done
}
deadline=$((SECONDS + 90))
until in_namespaces | grep -qx sleep; do
  ((SECONDS < deadline)) || fail "the job's task never ran in the cluster's namespaces within 90 s: $("$cluster_sh" run "$dir" squeue -h -j "$job" -o '%T %r' 2>&1)"
  sleep 0.1
done

"$cluster_sh" down "$dir"
trap - EXIT
left=$(in_namespaces | sort | uniq -c | tr '\n' ' ')
[[ -z $left ]] || fail "processes left in the cluster's namespaces: $left"
if [[ $(awk '{print $3 " " $22}' "/proc/$munged/stat" 2>/dev/null) =~ ^[^Z]\ $munged_start$ ]]; then
  fail "munged (pid $munged) outlived down"
fi
! grep -qF "$dir" /proc/self/mountinfo || fail "mounts under $dir remain"
[[ ! -e $dir ]] || fail "$dir remains"
[[ $(md5sum < /etc/hosts) == "$hosts_before" ]] || fail "/etc/hosts changed"
echo "PASS: up in $((SECONDS - t0))s total with a job, down left nothing behind"
