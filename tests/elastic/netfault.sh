# Sourced by the tests that run ddprun nodes as separate hosts in network namespaces and break
# the network between them (after lib.sh; root only). netfault_up makes the hosts, every fault
# has its heal, and the EXIT trap removes everything this file made.
#
# Hosts are namespaces ${NF}h1..hN with addresses 127.1.0.N on a bridge in a namespace of its own
# (${NF}sw), as in netns_test.sh: no private or public range, nothing leaves the machine, and
# 127.0.0.1 stays each host's own loopback. Host I's name is hI (in its /etc/hosts).
#
# Faults (HOST, FROM, TO are host numbers; each returns once the fault is in place):
#   nf_cut A B             A and B exchange nothing, both ways; others still reach both (nftables)
#   nf_uncut A B
#   nf_cut_oneway FROM TO  packets from FROM to TO are dropped, TO to FROM pass (nftables)
#   nf_uncut_oneway FROM TO
#   nf_isolate A           A's bridge port blocks every frame (a dead link, the carrier up)
#   nf_unisolate A
#   nf_loss A PCT          each packet into or out of A is dropped with probability PCT % (nftables)
#   nf_unloss A
#   nf_delay A MS [JITTER_MS]   each packet into or out of A waits MS +- JITTER_MS (uniform, so
#                               that a jitter reorders packets); nf_undelay A
#   nf_reorder A PCT MS         PCT % of A's packets go at once, the others wait MS (and are
#                               overtaken); nf_unreorder A
#   nf_duplicate A PCT          each packet into or out of A is sent twice with probability
#                               PCT % (nftables' dup); nf_unduplicate A
#   nf_flap A DOWN_S UP_S       A's port alternates blocking DOWN_S and forwarding UP_S, in the
#                               background, each change a line in $T/flap.A ("down|up REALTIME")
#   nf_unflap A                 stops it and leaves the port forwarding
#   nf_heal A              every fault on A undone
#   nf_etcd A...           not a fault: an etcd member on each A (the client endpoints in NF_ETCD)
# Delay and reordering are tests/elastic/nf_delay.py holding A's packets in a netfilter queue
# (iptables' NFQUEUE target), not tc netem: sch_netem is a module some kernels lack (this
# project's VM's among them), and nftables' own queue statement is not in every kernel either.
# nf_delay_available says whether this one has what they need (iptables and nfnetlink_queue);
# without it they fail with the reason, so that a test skips them visibly.

NF="nf$$"        # prefix of every namespace and interface made here
NF_HOSTS=0

nf_ns() { echo "${NF}h$1"; }
nf_addr() { echo "127.1.0.$1"; }
nf_port() { echo "${NF}p$1"; }

nf_down() {
  local ns f
  for f in "$T"/flap.*.pid "$T"/hold.*.pid; do [[ -e $f ]] && kill "$(cat "$f")" 2>/dev/null; done
  for ns in $(ip netns list | awk '{print $1}' | grep "^$NF" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
}

# netfault_up N: hosts 1..N on one bridge; returns once host 2 reaches host 1.
netfault_up() {
  NF_HOSTS=$1
  local sw=${NF}sw i j ns
  [[ $(id -u) == 0 ]] || skip "needs root to create network namespaces"
  command -v ip >/dev/null && command -v bridge >/dev/null || skip "needs iproute2 (ip, bridge)"
  command -v nft >/dev/null || skip "needs nftables (nft; scripts/install-deps.sh installs it)"
  trap 'rc=$?; nf_down || true; cleanup $rc' EXIT
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for i in $(seq 1 "$NF_HOSTS"); do
    ns=$(nf_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add eth0 netns "$ns" type veth peer name "$(nf_port "$i")" netns "$sw"
    ip -n "$sw" link set "$(nf_port "$i")" master br0 up
    ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.eth0.route_localnet=1
    ip -n "$ns" route del local 127.0.0.0/8 dev lo table local
    ip -n "$ns" route add local 127.0.0.0/16 dev lo table local
    ip -n "$ns" addr add "$(nf_addr "$i")/16" dev eth0
    ip -n "$ns" link set eth0 up
    mkdir -p "/etc/netns/$ns"
    { echo "127.0.0.1 localhost"; for j in $(seq 1 "$NF_HOSTS"); do echo "$(nf_addr "$j") h$j"; done; } > "/etc/netns/$ns/hosts"
  done
  wait_for 10 nf_reaches 2 1
}

# nf_reaches FROM TO: whether FROM gets an answer from TO within 1 s (TCP port 9, closed: a
# refusal is the answer).
nf_reaches() {
  local answer
  answer=$(ip netns exec "$(nf_ns "$1")" timeout 1 bash -c "exec 3<>/dev/tcp/$(nf_addr "$2")/9" 2>&1 || true)
  [[ $answer == *refused* ]]
}

# nf_on HOST NAME ARGS...: ddprun on host HOST in the background (pid in PID_<NAME>), its output
# in $T/NAME.out and $T/NAME.err. (ip netns exec remounts /sys, so ddprun finds no cgroups there
# and stops its workers by process group, as netns_test.sh's nodes do.)
nf_on() {
  local host=$1 name=$2; shift 2
  ip netns exec "$(nf_ns "$host")" "$DDPRUN" --local_addr="$(nf_addr "$host")" "$@" \
    >"$T/$name.out" 2>"$T/$name.err" &
  eval "PID_$name=$!"
}

# nf_table HOST TABLE RULES...: a table of HOST's nftables with an input and an output chain; each
# RULE is "in ..." or "out ...".
nf_table() {
  local host=$1 table=$2 rule; shift 2
  {
    echo "table inet $table {"
    echo "  chain in { type filter hook input priority 0;"
    for rule in "$@"; do [[ $rule == in\ * ]] && echo "    ${rule#in }"; done
    echo "  }"
    echo "  chain out { type filter hook output priority 0;"
    for rule in "$@"; do [[ $rule == out\ * ]] && echo "    ${rule#out }"; done
    echo "  }"
    echo "}"
  } | ip netns exec "$(nf_ns "$host")" nft -f -
}
nf_untable() { ip netns exec "$(nf_ns "$1")" nft delete table inet "$2" 2>/dev/null || true; }

nf_cut() {
  nf_table "$1" "cut_h$2" "out ip daddr $(nf_addr "$2") drop" "in ip saddr $(nf_addr "$2") drop"
}
nf_uncut() { nf_untable "$1" "cut_h$2"; }
nf_cut_oneway() { nf_table "$1" "oneway_h$2" "out ip daddr $(nf_addr "$2") drop"; }
nf_uncut_oneway() { nf_untable "$1" "oneway_h$2"; }
nf_loss() {
  local pct=$2
  (( pct >= 0 && pct <= 100 )) || fail "nf_loss: a percentage, not '$pct'"
  nf_table "$1" loss "out oifname eth0 numgen random mod 100 < $pct drop" \
    "in iifname eth0 numgen random mod 100 < $pct drop"
}
nf_unloss() { nf_untable "$1" loss; }

nf_isolate() { ip netns exec "${NF}sw" bridge link set dev "$(nf_port "$1")" state 0; }
nf_unisolate() { ip netns exec "${NF}sw" bridge link set dev "$(nf_port "$1")" state 3; }

# The queue of host A's held packets: both ways through its eth0, never its loopback. One at a time.
NF_QUEUE=7
nf_delay_rules() {  # nf_delay_rules A -A|-D
  local ns; ns=$(nf_ns "$1")
  ip netns exec "$ns" iptables -t mangle "$2" OUTPUT -o eth0 -j NFQUEUE --queue-num $NF_QUEUE --queue-bypass &&
    ip netns exec "$ns" iptables -t mangle "$2" PREROUTING -i eth0 -j NFQUEUE --queue-num $NF_QUEUE --queue-bypass
}
nf_delay_available() {
  command -v iptables > /dev/null && [[ -e /proc/net/netfilter/nfnetlink_queue ]]
}
nf_hold() {  # nf_hold A DELAY_MS JITTER_MS NOW_PCT
  local host=$1
  nf_delay_available || fail "nf_delay needs iptables (scripts/install-deps.sh installs it) and nfnetlink_queue in the kernel"
  [[ ! -e $T/hold.$host.pid ]] || fail "nf_delay/nf_reorder: host $host holds its packets already"
  rm -f "$T/hold.$host.ready"
  ip netns exec "$(nf_ns "$host")" python3 "$DDPRUN_TESTS_DIR/elastic/nf_delay.py" $NF_QUEUE "$T/hold.$host.ready" \
    "$2" "$3" "$4" &
  echo $! > "$T/hold.$host.pid"
  wait_for 10 test -s "$T/hold.$host.ready"
  nf_delay_rules "$host" -A
}
nf_unhold() {
  [[ -e $T/hold.$1.pid ]] || return 0
  nf_delay_rules "$1" -D 2> /dev/null || true
  local pid; pid=$(cat "$T/hold.$1.pid")
  kill "$pid" 2> /dev/null || true  # lets every packet it holds go, then exits
  wait "$pid" 2> /dev/null || true
  rm -f "$T/hold.$1.pid" "$T/hold.$1.ready"
}
nf_delay() { nf_hold "$1" "$2" "${3:-0}" 0; }
nf_undelay() { nf_unhold "$1"; }
nf_reorder() {
  (( $2 >= 0 && $2 <= 100 )) || fail "nf_reorder: a percentage, not '$2'"
  nf_hold "$1" "$3" 0 "$2"
}
nf_unreorder() { nf_unhold "$1"; }
# A copy of PCT % of the packets leaving A's eth0 (its outgoing) and its port on the bridge (its
# incoming), marked so that the copy, which passes the same hook again, is not copied again.
nf_duplicate() {
  local host=$1 pct=$2 ns dev
  (( pct >= 0 && pct <= 100 )) || fail "nf_duplicate: a percentage, not '$pct'"
  for ns_dev in "$(nf_ns "$host") eth0" "${NF}sw $(nf_port "$host")"; do
    read -r ns dev <<< "$ns_dev"
    ip netns exec "$ns" nft -f - <<NFT
table netdev dup_$dev {
  chain out {
    type filter hook egress device "$dev" priority 0;
    meta mark 0x2a accept
    numgen random mod 100 < $pct meta mark set 0x2a dup to "$dev"
  }
}
NFT
  done
}
nf_unduplicate() {
  ip netns exec "$(nf_ns "$1")" nft delete table netdev dup_eth0 2> /dev/null || true
  ip netns exec "${NF}sw" nft delete table netdev "dup_$(nf_port "$1")" 2> /dev/null || true
}

nf_flap() {
  local host=$1 down=$2 up=$3
  (
    while :; do
      nf_isolate "$host"; echo "down $(date +%s.%N)" >> "$T/flap.$host"; sleep "$down"
      nf_unisolate "$host"; echo "up $(date +%s.%N)" >> "$T/flap.$host"; sleep "$up"
    done
  ) &
  echo $! > "$T/flap.$host.pid"
}
nf_unflap() {
  [[ -e $T/flap.$1.pid ]] || return 0
  local pid; pid=$(cat "$T/flap.$1.pid")
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$T/flap.$1.pid"
  nf_unisolate "$1"
}

# nf_etcd HOST...: an etcd cluster of one member on each HOST, serving clients at
# $(nf_addr HOST):2379 (the endpoints, comma-separated, in NF_ETCD); returns once host 1 has every
# member healthy. Data folders are named relative to $T (no_leftovers looks for processes that name
# $T); the members go with the namespaces.
nf_etcd() {
  local host addr cluster=
  NF_ETCD=
  for host in "$@"; do
    cluster+=${cluster:+,}h$host=http://$(nf_addr "$host"):2380
    NF_ETCD+=${NF_ETCD:+,}$(nf_addr "$host"):2379
  done
  for host in "$@"; do
    addr=$(nf_addr "$host")
    (cd "$T" && exec ip netns exec "$(nf_ns "$host")" etcd --name "h$host" --data-dir "etcd.h$host" \
      --listen-client-urls "http://$addr:2379" --advertise-client-urls "http://$addr:2379" \
      --listen-peer-urls "http://$addr:2380" --initial-advertise-peer-urls "http://$addr:2380" \
      --initial-cluster "$cluster" --initial-cluster-token "$NF" > "$T/etcd.h$host.log" 2>&1) &
  done
  nf_etcd_up() {
    local endpoint
    for endpoint in ${NF_ETCD//,/ }; do
      ip netns exec "$(nf_ns 1)" curl -sf "http://$endpoint/health" | grep -q '"health":"true"' || return 1
    done
  }
  wait_for 60 nf_etcd_up
}

nf_heal() {
  local host=$1 table
  nf_unflap "$host"
  nf_unisolate "$host"
  nf_unhold "$host"
  nf_unduplicate "$host"
  for table in $(ip netns exec "$(nf_ns "$host")" nft list tables inet 2>/dev/null | awk '{print $3}'); do
    nf_untable "$host" "$table"
  done
}
