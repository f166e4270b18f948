#!/usr/bin/env bash
# A real SLURM cluster on this one machine, for tests: a login/controller host "ctl" and compute
# nodes n1..nN, each in its own network and UTS namespace (own address 127.1.0.x, own hostname,
# own /etc/hosts), joined by a bridge that lives in yet another namespace. Nothing outside the
# state directory is touched: the namespaces are bind-mounted files under it, munged runs with
# its own key and socket there, and no file in /etc is modified. So several clusters can run at
# once (tests in parallel, several checkouts) and `down` leaves nothing behind.
#
#   cluster.sh up DIR [--nodes N]   start (default 2 nodes); DIR is new, empty, or an old cluster's
#   cluster.sh down DIR             stop every daemon and job, remove the namespaces and DIR
#   cluster.sh run DIR [--on HOST] CMD [ARGS...]
#                                   run CMD on the login host "ctl" (default) or on node HOST,
#                                   with SLURM_CONF set: `cluster.sh run DIR sbatch job.sh`
#   cluster.sh status DIR           sinfo, then squeue
#
# `up` exits 77 (the tests' skip code), with the reason on stderr and in DIR/skip-reason, when this
# machine cannot run the cluster (not root, no network namespaces, SLURM absent and not
# installable); any other failure to start is an error (exit 1): the daemons' logs are shown
# and whatever had started is taken down again.
# Each node offers CPUS_PER_NODE CPUs and GPUS_PER_NODE fake GPUs (a gres whose device files are
# /dev/null look-alikes in DIR), so jobs see SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES as on a GPU cluster.
set -euo pipefail

readonly CPUS_PER_NODE=4
readonly GPUS_PER_NODE=2
readonly SUBNET=127.1.0             # hosts' addresses inside their namespaces; invisible outside
readonly CTL_ADDR=$SUBNET.254
readonly UP_TIMEOUT_S=${DDPRUN_SLURM_UP_TIMEOUT:-45}     # until every node is idle
readonly DOWN_TIMEOUT_S=${DDPRUN_SLURM_DOWN_TIMEOUT:-15} # for daemons to exit after SIGTERM
readonly SKIP=77
readonly MARKER=.ddprun-slurm-cluster  # in every state folder that `up` made

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

skip() {
  echo "cluster.sh: cannot run a SLURM cluster here: $*" >&2
  if [[ -d ${dir:-} ]]; then echo "$*" > "$dir/skip-reason"; fi
  exit $SKIP
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 64; }

# --- processes -------------------------------------------------------------------------------

# True while PID runs (PID 1 here reaps orphans lazily, so a zombie counts as gone).
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z && $state != X ]]
}

# The pid in FILE if that process is alive and runs program NAME (guards against pid reuse).
pid_from_file() {
  local file=$1 name=$2 pid
  [[ -r $file ]] || return 1
  read -r pid < "$file" || return 1
  [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  echo "$pid"
}

# Sends SIGTERM to the daemon recorded in FILE and waits until it has exited.
stop_daemon() {
  local file=$1 name=$2 pid deadline
  pid=$(pid_from_file "$file" "$name") || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  deadline=$((SECONDS + DOWN_TIMEOUT_S))
  while alive "$pid"; do
    if ((SECONDS >= deadline)); then
      log "$name (pid $pid) still running ${DOWN_TIMEOUT_S}s after SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + DOWN_TIMEOUT_S))
    fi
    sleep 0.05
  done
}

# Pids of the processes whose network namespace is one of DIR's (daemons, job steps, tasks).
pids_in_namespaces() {
  local ns ids=() p link
  for ns in "$dir"/ns/*; do
    mountpoint -q "$ns" && ids+=("net:[$(stat -L -c %i "$ns")]")
  done
  ((${#ids[@]})) || return 0
  for p in /proc/[0-9]*; do
    link=$(readlink "$p/ns/net" 2>/dev/null) || continue
    for id in "${ids[@]}"; do
      if [[ $link == "$id" ]] && alive "${p#/proc/}"; then echo "${p#/proc/}"; fi
    done
  done
}

# --- set-up ----------------------------------------------------------------------------------

check_prerequisites() {
  [[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, munged as the munge user)"
  local missing=() cmd
  for cmd in unshare nsenter ip runuser mountpoint; do
    command -v "$cmd" > /dev/null || missing+=("$cmd")
  done
  ((${#missing[@]} == 0)) || skip "missing commands: ${missing[*]}"
  unshare --net true 2> /dev/null || skip "network namespaces are not available (unshare --net failed)"
  if ! command -v slurmctld > /dev/null || ! command -v slurmd > /dev/null \
     || ! command -v sbatch > /dev/null || ! command -v munged > /dev/null; then
    install_slurm
  fi
}

# The same packages as `scripts/install-deps.sh --slurm`, without the rest of its list.
install_slurm() {
  [[ ${DDPRUN_SLURM_NO_INSTALL:-0} != 1 ]] \
    || skip "SLURM is not installed (run scripts/install-deps.sh --slurm)"
  command -v apt-get > /dev/null || skip "SLURM is not installed and there is no apt-get"
  log "installing slurmctld slurmd slurm-client munge"
  local opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
  if ! { DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" update -qq \
         && DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" install -y -qq \
              --no-install-recommends slurmctld slurmd slurm-client munge; } > "$dir/install.log" 2>&1
  then
    skip "installing SLURM failed (see $dir/install.log): $(tail -n 1 "$dir/install.log")"
  fi
  local cmd
  for cmd in slurmctld slurmd sbatch munged mungekey; do
    command -v "$cmd" > /dev/null || skip "$cmd is still missing after installing SLURM"
  done
}

# The network: one bridge in namespace "sw"; host H gets namespace H with eth0 at ADDR.
make_host_namespace() {
  local host=$1 addr=$2 port=$3
  touch "$dir/ns/$host"
  unshare --net="$dir/ns/$host" true
  ip link add eth0 netns "$dir/ns/$host" type veth peer name "$port" netns "$dir/ns/sw"
  nsenter --net="$dir/ns/sw" ip link set "$port" master br0 up
  # 127.1.0.0/16 must leave through eth0: shrink the local 127/8 route to 127.0/16 and allow
  # loopback-range addresses on a real interface.
  nsenter --net="$dir/ns/$host" sh -e -c "
    ip link set lo up
    echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
    echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet
    ip route del local 127.0.0.0/8 dev lo table local
    ip route add local 127.0.0.0/16 dev lo table local
    ip addr add $addr/16 dev eth0
    ip link set eth0 up"
}

make_network() {
  mkdir -p "$dir/ns"
  touch "$dir/ns/sw"
  unshare --net="$dir/ns/sw" true
  nsenter --net="$dir/ns/sw" sh -e -c 'ip link set lo up; ip link add br0 type bridge; ip link set br0 up'
  make_host_namespace ctl "$CTL_ADDR" pctl
  local i
  for ((i = 1; i <= nodes; i++)); do make_host_namespace "n$i" "$SUBNET.$i" "p$i"; done
  {
    echo "127.0.0.1 localhost"
    echo "$CTL_ADDR ctl"
    for ((i = 1; i <= nodes; i++)); do echo "$SUBNET.$i n$i"; done
  } > "$dir/hosts"
}

start_munge() {
  install -d -o munge -g munge -m 0755 "$dir/munge"  # clients need x on the socket's folder
  runuser -u munge -- mungekey --create --keyfile="$dir/munge/munge.key"
  runuser -u munge -- munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed"
}

write_config() {
  local i
  mkdir -p "$dir/state" "$dir/gpu"
  # slurmd wants character devices; these are copies of /dev/null, harmless if anything opens them.
  for ((i = 0; i < GPUS_PER_NODE; i++)); do mknod -m 0666 "$dir/gpu/$i" c 1 3; done
  {
    cat <<EOF
ClusterName=ddprun
SlurmctldHost=ctl($CTL_ADDR)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=10
KillWait=5
MessageTimeout=5
MailProg=/bin/true
GresTypes=gpu
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
EOF
    for ((i = 1; i <= nodes; i++)); do
      echo "NodeName=n$i NodeAddr=$SUBNET.$i CPUs=$CPUS_PER_NODE RealMemory=4000 Gres=gpu:$GPUS_PER_NODE State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$dir/slurm.conf"
  echo "Name=gpu File=$dir/gpu/[0-$((GPUS_PER_NODE - 1))]" > "$dir/gres.conf"
}

# Runs CMD as host HOST: its network namespace, a fresh UTS namespace named HOST, and a private
# mount namespace whose /etc/hosts is DIR/hosts. Daemons started so keep these namespaces, and
# so do the jobs slurmd starts.
as_new_host() {
  local host=$1; shift
  nsenter --net="$dir/ns/$host" unshare --uts --mount --propagation private \
    sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
    sh "$dir/hosts" "$host" "$@"
}

wait_until_idle() {
  local deadline=$((SECONDS + UP_TIMEOUT_S)) states=""
  while ((SECONDS < deadline)); do
    states=$(run_on ctl sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ') || true
    if [[ $(grep -o 'idle' <<< "$states" | wc -l) -eq $nodes ]]; then return 0; fi
    sleep 0.1
  done
  log "nodes not idle after ${UP_TIMEOUT_S}s (raise DDPRUN_SLURM_UP_TIMEOUT); sinfo: ${states:-nothing}"
  return 1
}

dump_logs() {
  local f
  for f in "$dir"/munge/munged.log "$dir"/slurmctld.log "$dir"/slurmd-*.log; do
    [[ -r $f ]] || continue
    echo "----- $f (last 30 lines)" >&2
    tail -n 30 "$f" >&2
  done
}

start_cluster() {
  local i
  make_network
  start_munge
  write_config
  as_new_host ctl slurmctld -f "$dir/slurm.conf"
  for ((i = 1; i <= nodes; i++)); do
    mkdir -p "$dir/spool-n$i"
    as_new_host "n$i" slurmd -f "$dir/slurm.conf" -N "n$i"
  done
  wait_until_idle
}

cmd_up() {
  if [[ -e $dir/$MARKER ]]; then
    log "$dir holds a cluster already; stopping it first"
    cmd_down
  elif [[ -d $dir && -n $(ls -A "$dir") ]]; then
    die "$dir is not empty and holds no cluster; give an empty or new folder"
  fi
  mkdir -p "$dir"
  touch "$dir/$MARKER"
  chmod 0755 "$dir"  # munged (as user munge) must reach DIR/munge
  rm -f "$dir/skip-reason"
  check_prerequisites
  local t0=$SECONDS rc=0
  # In a subshell so that set -e stops at the first failed step; then show why and remove
  # whatever had started.
  set +e
  (set -e; start_cluster)
  rc=$?
  set -e
  if ((rc != 0)); then
    log "starting the cluster failed"
    dump_logs
    cmd_down
    exit 1
  fi
  echo "$nodes" > "$dir/nodes"
  log "up in $((SECONDS - t0))s: $nodes nodes, state in $dir (SLURM_CONF=$dir/slurm.conf)"
}

cmd_down() {
  [[ -d $dir ]] || return 0
  # DIR is deleted below: only if `up` made it.
  [[ -e $dir/$MARKER ]] || die "$dir was not made by cluster.sh up (no $MARKER); not touching it"
  local f node pids deadline
  for f in "$dir"/slurmd-*.pid; do [[ -e $f ]] && stop_daemon "$f" slurmd; done
  stop_daemon "$dir/slurmctld.pid" slurmctld
  # Whatever is left in the hosts' namespaces belongs to jobs: slurmstepd and tasks.
  deadline=$((SECONDS + DOWN_TIMEOUT_S))
  while pids=$(pids_in_namespaces) && [[ -n $pids ]]; do
    ((SECONDS < deadline)) || die "processes still in the cluster's namespaces: $(tr '\n' ' ' <<< "$pids")"
    kill -KILL $pids 2>/dev/null || true
    sleep 0.05
  done
  stop_daemon "$dir/munge/munged.pid" munged
  for node in "$dir"/ns/*; do
    if mountpoint -q "$node"; then umount "$node"; fi
  done
  rm -rf "$dir"
}

# Replaces this shell with CMD on HOST, inside the namespaces of that host's daemon.
run_on() {
  local host=$1 pidfile name pid; shift
  if [[ $host == ctl ]]; then pidfile=$dir/slurmctld.pid name=slurmctld
  else pidfile=$dir/slurmd-$host.pid name=slurmd; fi
  pid=$(pid_from_file "$pidfile" "$name") || die "no running $name for host $host in $dir"
  SLURM_CONF=$dir/slurm.conf exec nsenter -t "$pid" --net --uts --mount --wd="$PWD" -- "$@"
}

main() {
  (($# >= 2)) || usage
  local cmd=$1
  dir=$(realpath -m "$2")
  shift 2
  case $cmd in
    up)
      nodes=2
      while (($#)); do
        case $1 in
          --nodes) nodes=${2:?--nodes needs a number}; shift 2 ;;
          *) usage ;;
        esac
      done
      [[ $nodes =~ ^[1-9]$ ]] || die "--nodes must be 1..9, not '$nodes'"
      cmd_up
      ;;
    down) (($# == 0)) || usage; cmd_down ;;
    run)
      local host=ctl
      if [[ ${1:-} == --on ]]; then host=${2:?--on needs a host}; shift 2; fi
      (($#)) || usage
      run_on "$host" "$@"
      ;;
    status) (run_on ctl sinfo); (run_on ctl squeue) ;;
    *) usage ;;
  esac
}

main "$@"
