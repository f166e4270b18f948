# Sourced by the elastic tests that run several ddprun processes as nodes on loopback addresses.
# port: a rendezvous port, next_port: a fresh one for the next scenario.
port=$(free_tcp_port)
next_port() { port=$(free_tcp_port "$port"); }
# node ADDR NAME ARGS...: starts ddprun as the node at ADDR in the background (pid in PID_<NAME>),
# its output in $T/NAME.out and $T/NAME.err.
node() {
  local addr=$1 name=$2; shift 2
  "$DDPRUN" --local_addr="$addr" "$@" >"$T/$name.out" 2>"$T/$name.err" &
  eval "PID_$name=$!"
}
# nsnode ADDR NAME ARGS...: node(), in a mount namespace of its own with a private /tmp, /dev/shm,
# /run and /var/tmp (empty tmpfs), as a node of a cluster has: its DDPRUN_SNAPSHOT_DIR is its own,
# wherever ddprun puts it, and only the replication carries a file to another node's. The test's
# folder $T alone is seen by every node, at its path (bound in again over the private one): the
# test's own channel, where the workers' scripts and the files they leave for the test are; and
# the folders in NSNODE_SHARED (a space-separated list, as a cluster's nodes share munged's key, not
# its socket: a test's munged in /tmp). ddprun's pid in PID_<NAME> (unshare and sh exec it). Root
# only: check can_nsnode first.
# The folders a node sees as the machine has them: $T, the source and build trees (a clone under
# /tmp, as a CI's may be), ddprun's own folder, and NSNODE_SHARED; outer ones first, so that a
# folder inside another is bound after it and stays seen.
nsnode_shared() {
  local p
  for p in "$T" "${DDPRUN_SOURCE_DIR:-}" "${DDPRUN_BUILD_DIR:-}" "$(dirname "$DDPRUN")" ${NSNODE_SHARED:-}; do
    [[ -n $p && -d $p ]] && echo "${#p} $(cd "$p" && pwd -P)"
  done | sort -n | cut -d' ' -f2- | awk '!seen[$0]++' | tr '\n' ' '
}
nsnode() {
  local addr=$1 name=$2; shift 2
  # Each shared folder is bound into a tmpfs of the namespace's own at /mnt first (every other path
  # may be under one of the four), and back at its path once they are mounted.
  unshare -m --propagation private sh -c '
    shared=$1; shift
    mount -t tmpfs none /mnt || exit
    i=0; for p in $shared; do mkdir /mnt/$i && mount --bind "$p" /mnt/$i || exit; i=$((i + 1)); done
    for d in /tmp /dev/shm /run /var/tmp; do mount -t tmpfs -o mode=1777 none "$d" || exit; done
    i=0; for p in $shared; do mkdir -p "$p" && mount --bind /mnt/$i "$p" || exit; i=$((i + 1)); done
    exec "$@"' \
    nsnode "$(nsnode_shared)" "$DDPRUN" --local_addr="$addr" "$@" >"$T/$name.out" 2>"$T/$name.err" &
  eval "PID_$name=$!"
}
can_nsnode() { [[ $(id -u) == 0 ]] && unshare -m --propagation private true 2>/dev/null; }
# finish NAME: waits for node NAME; its exit code in RC_<NAME> (bash's line about a node the test
# killed left out: the code says it).
finish() { local rc=0; wait "$(eval echo "\$PID_$1")" 2>/dev/null || rc=$?; eval "RC_$1=$rc"; }
# finish_within SECONDS NAME: as finish, but fails, showing its stderr, when node NAME is still
# running after SECONDS.
finish_within() {
  local pid; pid=$(eval echo "\$PID_$2")
  gone() { ! kill -0 "$pid" 2>/dev/null || [[ $(ps -o stat= -p "$pid") == Z* ]]; }
  poll_until "$1" gone || { show "$2" >&2; fail "node $2 did not end within $1 s (its stderr above)"; }
  finish "$2"
}
# show NAME...: the nodes' stderr, for a failure's message.
show() { local n; for n in "$@"; do echo "--- $n.err"; cat "$T/$n.err"; done; }
