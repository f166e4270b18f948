#!/usr/bin/env bash
# --rdzv_backend=etcd through a 3-member etcd cluster that loses a member, killed (SIGKILL) or
# hung (SIGSTOP: no FIN, no answer), while the nodes join and while they run, the lost member
# being etcd's Raft leader, the member the nodes talk to, or both. Each time the job forms or
# goes on over the other two members, in one round, and no node's lease lapses (a node's key
# keeps the lease it was put with). Each scenario prints what the loss cost: from the loss to
# every worker running. Skipped without etcd.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
command -v etcd >/dev/null || skip "needs etcd (apt-get install etcd-server etcd-client)"
command -v etcdctl >/dev/null || skip "needs etcdctl (apt-get install etcd-client)"
command -v curl >/dev/null || skip "needs curl to check etcd's health"
source "$DDPRUN_TESTS_DIR/elastic/etcd_lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

etcd_members http m1 m2 m3
ctl() { ETCDCTL_API=3 etcdctl --command-timeout=2s --endpoints="127.0.0.1:$(eval echo "\$CLIENT_$1")" "${@:2}"; }

# raft_leader: prints the member that is etcd's Raft leader now; fails while there is none.
raft_leader() {
  local n
  for n in m1 m2 m3; do
    ctl "$n" endpoint status -w json 2>/dev/null | python3 -c 'import json, sys
s = json.load(sys.stdin)[0]["Status"]
sys.exit(0 if s["leader"] == s["header"]["member_id"] else 1)' && { echo "$n"; return 0; }
  done
  return 1
}
# restore NAME HOW: brings back the member that the scenario killed or stopped.
restore() {
  if [[ $2 == KILL ]]; then
    wait "$(eval echo "\$ETCD_$1")" 2>/dev/null || true
    start_etcd "$1" "$(eval echo "\$CLIENT_$1")" "$(eval echo "\$PEER_$1")" "$CLUSTER" http
  else
    kill -CONT "$(eval echo "\$ETCD_$1")"
  fi
  members_up http m1 m2 m3 || fail "etcd member $1 did not come back"
}
# node_lease ALIVE NAME RUN: the lease of node NAME's key in job RUN, read through member ALIVE.
node_lease() {
  local pid; pid=$(eval echo "\$PID_$2")
  ctl "$1" get --prefix "/ddprun/v1/$3/nodes/" -w json | python3 -c 'import base64, json, sys
for kv in json.load(sys.stdin).get("kvs", []):
    if "-'"$pid"'-" in base64.b64decode(kv["key"]).decode(): print(format(int(kv["lease"]), "x"))'
}
# millis: now, in milliseconds.
millis() { date +%s%3N; }

worker until_released <<'SH'
#!/bin/sh
echo "$GROUP_WORLD_SIZE" >> "$1/member.$RANK"
while [ ! -e "$1/release" ]; do sleep 0.1; done
exit 0
SH
running() { [[ $(cat "$1"/member.* 2>/dev/null | wc -l) == 2 ]]; }

# scenario NAME WHEN HOW WHO: a job of two nodes, a and b, whose first etcd endpoint is the
# member to lose (WHO=used: the Raft leader, so that the loss is both; WHO=leader: the Raft
# leader, the nodes talking to a follower). WHEN=join: the member is lost after node a joined,
# before b starts; WHEN=run: once both nodes' workers run. HOW: KILL or STOP.
scenario() {
  local name=$1 when=$2 how=$3 who=$4 leader victim first alive n dir lease_a lease_b t0 cost
  dir="$T/$name"
  mkdir -p "$dir"
  wait_for 30 raft_leader >/dev/null
  leader=$(raft_leader)
  victim=$leader
  first=$leader
  for n in m1 m2 m3; do [[ $n == "$leader" ]] || alive=$n; done
  [[ $who == leader ]] && first=$alive
  local endpoints=127.0.0.1:$(eval echo "\$CLIENT_$first")
  for n in m1 m2 m3; do
    [[ $n == "$first" ]] || endpoints+=,127.0.0.1:$(eval echo "\$CLIENT_$n")
  done
  local job=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$endpoints" --rdzv_id="$name"
             --rdzv_conf=join_timeout=60,heartbeat_timeout=5)
  node 127.0.0.2 a "${job[@]}" "$T/until_released" "$dir"
  a_joined() { lease_a=$(node_lease "$alive" a "$name") && [[ -n $lease_a ]]; }
  wait_for 30 a_joined
  if [[ $when == run ]]; then
    node 127.0.0.3 b "${job[@]}" "$T/until_released" "$dir"
    wait_for 60 running "$dir"
    lease_b=$(node_lease "$alive" b "$name")
  fi
  t0=$(millis)
  kill -"$how" "$(eval echo "\$ETCD_$victim")"
  if [[ $when == join ]]; then
    node 127.0.0.3 b "${job[@]}" "$T/until_released" "$dir"
    wait_for 60 running "$dir"
    cost="job formed $(( $(millis) - t0 )) ms after the loss"
  else
    # The nodes' leases renewed through the others: etcd's remaining TTL of each went up twice
    # after the loss (once could be the extension every lease gets from a new Raft leader).
    declare -A ttl=() rises=()
    ttl_rose_twice() {
      local now
      now=$(ctl "$alive" lease timetolive "$1" | sed -n 's/.*remaining(\(-\?[0-9]*\)s).*/\1/p') || return 1
      [[ -n $now ]] || return 1
      [[ -n ${ttl[$1]:-} ]] && (( now > ttl[$1] )) && rises[$1]=$(( ${rises[$1]:-0} + 1 ))
      ttl[$1]=$now
      (( ${rises[$1]:-0} >= 2 ))
    }
    wait_for 30 ttl_rose_twice "$lease_a"
    wait_for 30 ttl_rose_twice "$lease_b"
    cost="both leases renewed twice $(( $(millis) - t0 )) ms after the loss"
  fi
  expect_eq "$(node_lease "$alive" a "$name")" "$lease_a" "[$name] node a's lease after the loss (a new one: it lapsed)"
  touch "$dir/release"
  finish a; finish b
  expect_eq "$RC_a $RC_b" "0 0" "[$name] the job's exit codes ($(show a b))"
  expect_eq "$(cat "$dir"/member.* | tr '\n' ' ')" "2 2 " "[$name] one round of two nodes"
  expect_not_in "$T/a.err" "lease|lost"
  expect_not_in "$T/b.err" "lease|lost"
  restore "$victim" "$how"
  expect_eq "$(ctl "$alive" get --prefix /ddprun/ --keys-only | sed '/^$/d')" "" "[$name] the job's keys after a clean end"
  ok "$name: etcd's Raft leader ($victim, $([[ $who == used ]] && echo "the nodes' first endpoint" || echo "the nodes talking to $first")) $([[ $how == KILL ]] && echo killed || echo stopped) $([[ $when == join ]] && echo "after node a joined" || echo "mid-run"): $cost"
}

scenario join-killed join KILL used
scenario join-killed-follower join KILL leader
scenario join-stopped join STOP used
scenario run-killed run KILL used
scenario run-killed-follower run KILL leader
scenario run-stopped run STOP used
