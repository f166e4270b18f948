#!/usr/bin/env bash
# Separate hosts in network namespaces that this test creates and removes: addresses 127.1.0.N
# on a bridge in a namespace of its own (no private or public range; nothing leaves the machine).
# A partition is a bridge port set to blocking: frames are dropped silently, as with a dead link.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null && command -v bridge >/dev/null || skip "needs iproute2 (ip, bridge)"

p="dd$$"          # prefix of every namespace and interface this test makes
sw=${p}sw
netns_down() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^$p" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
}
trap 'rc=$?; netns_down || true; cleanup $rc' EXIT

ip netns add "$sw"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for i in 1 2 3; do
  ns=${p}h$i
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add eth0 netns "$ns" type veth peer name "${p}p$i" netns "$sw"
  ip -n "$sw" link set "${p}p$i" master br0 up
  ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.eth0.route_localnet=1
  # 127.0.0.1 stays this host's own loopback; 127.1.0.0/16 is the "network".
  ip -n "$ns" route del local 127.0.0.0/8 dev lo table local
  ip -n "$ns" route add local 127.0.0.0/16 dev lo table local
  ip -n "$ns" addr add "127.1.0.$i/16" dev eth0
  ip -n "$ns" link set eth0 up
  mkdir -p "/etc/netns/$ns"
  { echo "127.0.0.1 localhost"; for j in 1 2 3; do echo "127.1.0.$j h$j"; done; } > "/etc/netns/$ns/hosts"
done
reachable() {
  local answer
  answer=$(ip netns exec "${p}h2" bash -c "exec 3<>/dev/tcp/127.1.0.1/9" 2>&1 || true)
  [[ $answer == *refused* ]]
}
wait_for 10 reachable   # h2 reaches h1 across the bridge (the closed port answers "refused")

# on HOST NAME ARGS...: ddprun on host HOST in the background (pid in PID_<NAME>).
on() {
  local host=$1 name=$2; shift 2
  ip netns exec "${p}h$host" "$DDPRUN" --local_addr="127.1.0.$host" "$@" >"$T/$name.out" 2>"$T/$name.err" &
  eval "PID_$name=$!"
}
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"  # finish

worker dump <<'SH'
#!/bin/sh
echo "$RANK $WORLD_SIZE $GROUP_WORLD_SIZE $MASTER_ADDR" > "$T/env.$RANK"
SH
static=(--nnodes=2 --nproc_per_node=2 --master_addr=h1 --master_port=29500)
on 1 a "${static[@]}" --node_rank=0 "$T/dump"
on 2 b "${static[@]}" --node_rank=1 "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "two hosts"
for r in 0 1 2 3; do expect_eq "$(cat "$T/env.$r")" "$r 4 2 127.1.0.1" "rank $r"; done
ok "2 hosts in namespaces: ranks 0-3, MASTER_ADDR on host 1"

# Partition host 3: the rendezvous notices the missing heartbeats, the other two go on without
# it, and host 3, cut off from the rendezvous, stops its workers and exits with a clear error.
worker until_two <<'SH'
#!/bin/sh
echo "$GROUP_WORLD_SIZE" >> "$T/gws.$GROUP_RANK.$$"
[ "$GROUP_WORLD_SIZE" = 3 ] && exec sleep 120
exit 0
SH
c10d=(--nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=h1:29400 --rdzv_id=part
      --rdzv_conf=last_call_timeout=30,heartbeat_timeout=2)
on 1 a "${c10d[@]}" "$T/until_two"
on 2 b "${c10d[@]}" "$T/until_two"
on 3 c "${c10d[@]}" "$T/until_two"
three_running() { [[ $(cat "$T"/gws.* 2>/dev/null | grep -c '^3$') == 3 ]]; }
wait_for 30 three_running
ip netns exec "$sw" bridge link set dev "${p}p3" state 0
cut=$SECONDS
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "the two connected hosts"
expect_in "$T/a.err" "was lost"
finish c
expect_eq "$RC_c" 69 "the partitioned host"
expect_in "$T/c.err" "lost the rendezvous"
ok "partitioned host detected; survivors finished as 2 nodes; host 3 exited 69 after $((SECONDS - cut))s"

netns_down
[[ -z "$(ip netns list | grep "^$p" || true)" ]] || fail "namespaces left behind"
ok "namespaces removed"
