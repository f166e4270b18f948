#!/usr/bin/env bash
# A slow link that cuts nothing off (issue 43): node b's packets, both ways, wait MS ms (plus or
# minus a quarter of it) for SECONDS, on hosts in network namespaces (root, nft and iptables;
# skipped without). A node whose every message is answered, late, is not lost: b must not fence,
# the coordinator must not count it lost, and the job must run on and end 0 on both nodes once the
# delay heals, every line printed and no rank held twice (split_brain_check.py).
#
# usage: delay_test.sh [BACKEND [MS [SECONDS]]]: BACKEND tcp (node a on h1 hosts the rendezvous;
# the default) or etcd (one member on h3); MS one way (400); SECONDS (10). heartbeat_timeout=3, so
# that the delay is a large part of it; DELAY_HEARTBEAT_TIMEOUT sets another.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/netfault.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"  # finish_within, show
backend=${1:-tcp} ms=${2:-400} seconds=${3:-10}
case $backend in
  tcp) hosts=2 ;;
  etcd) hosts=3; command -v etcd >/dev/null || skip "needs etcd (scripts/install-deps.sh installs it)" ;;
  *) fail "BACKEND: tcp or etcd, not '$backend'" ;;
esac
netfault_up $hosts
nf_delay_available || skip "nf_delay needs iptables (scripts/install-deps.sh installs it) and nfnetlink_queue"
export RUN=$T/run
mkdir -p "$RUN"
if [[ $backend == etcd ]]; then
  nf_etcd 3
  rdzv=(--rdzv_backend=etcd --rdzv_endpoint="$NF_ETCD")
else
  rdzv=(--rdzv_backend=c10d --rdzv_endpoint="h1:$(free_tcp_port)")
fi
heartbeat_timeout=${DELAY_HEARTBEAT_TIMEOUT:-3}
job=(--nnodes=2 --nproc_per_node=2 "${rdzv[@]}" --rdzv_id=delay --shutdown_timeout=10
     --rdzv_conf="heartbeat_timeout=$heartbeat_timeout,join_timeout=60")

# The worker: "start", a numbered line every 0.1 s (each in $RUN/printed.NODE once written) until
# $RUN/release, then "done".
worker life <<'SH'
#!/bin/sh
rec() {
  printf '{"what":"%s","rank":%s,"pid":%s,"restart":%s,"real":%s,"mono":%s}\n' "$1" "$RANK" $$ \
    "$TORCHELASTIC_RESTART_COUNT" "$(date +%s.%N)" "$(cut -d' ' -f1 /proc/uptime)" >> "$RUN/rec.$NF_NODE"
}
rec start
i=0
while [ ! -e "$RUN/release" ]; do
  i=$((i + 1))
  echo "tick $NF_NODE $$ $i" && echo "tick $NF_NODE $$ $i" >> "$RUN/printed.$NF_NODE"
  sleep 0.1
done
rec done
SH
started() { [[ $(cat "$RUN"/rec.* 2>/dev/null | grep -c '"start"') -ge 4 ]]; }

NF_NODE=a nf_on 1 a "${job[@]}" --event_log="$RUN/a.events" "$T/life"
NF_NODE=b nf_on 2 b "${job[@]}" --event_log="$RUN/b.events" "$T/life"
wait_for 60 started
nf_delay 2 "$ms" $((ms / 4))
sleep "$seconds"  # the fault's length: what is tested is that nothing happens meanwhile
nf_undelay 2
kill -0 "$PID_a" && kill -0 "$PID_b" || { show a b; fail "a node ended during the delay"; }
touch "$RUN/release"
finish_within 60 a; finish_within 60 b
expect_eq "$RC_a $RC_b" "0 0" "a and b after $seconds s of $ms ms each way on b's link ($(show a b))"
! grep -q "fencing" "$T/b.err" || fail "b fenced though every message of it was answered ($(show b))"
[[ $(grep -c '"start"' "$RUN/rec.a" "$RUN/rec.b" | awk -F: '{s += $2} END {print s}') == 4 ]] \
  || fail "the workers were restarted during the delay ($(show a b))"
touch "$RUN/printed.a" "$RUN/printed.b"
python3 "$DDPRUN_TESTS_DIR/elastic/split_brain_check.py" --expect-success \
  --node a "$RUN/a.events" "$RUN/rec.a" --node b "$RUN/b.events" "$RUN/rec.b" \
  --output a "$T/a.out" "$RUN/printed.a" --output b "$T/b.out" "$RUN/printed.b" || fail "the checker found a broken invariant"
wait_for 30 no_leftovers
ok "$backend: $seconds s of $ms ms (+- $((ms / 4))) each way on b's link, heartbeat_timeout=$heartbeat_timeout: nobody lost, no restart, the job ended 0"
