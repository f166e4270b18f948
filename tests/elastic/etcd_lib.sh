# Sourced by the etcd tests: etcd members started on free loopback ports, their data in the
# test's folder. Needs etcd, etcdctl and curl (the tests skip without them).

# free_ports N: N loopback TCP ports that are free now.
free_ports() {
  python3 -c 'import socket,sys
ss=[socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1",0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
# start_etcd NAME CLIENT_PORT PEER_PORT CLUSTER SCHEME: one member, in the background (pid in
# ETCD_<NAME>), its clients served over SCHEME (http, https), with the arguments in ETCD_ARGS.
ETCD_ARGS=() CURL_ARGS=()
start_etcd() {
  local name=$1 client=$2 peer=$3 cluster=$4 scheme=$5
  etcd --name "$name" --data-dir "$T/etcd.$name" \
    --listen-client-urls "$scheme://127.0.0.1:$client" --advertise-client-urls "$scheme://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$cluster" --initial-cluster-token "$T" "${ETCD_ARGS[@]}" >"$T/etcd.$name.log" 2>&1 &
  eval "ETCD_$name=$!"
}
# members_up SCHEME NAME...: 0 once every member answers /health (curl with CURL_ARGS); 1 as soon
# as one has exited; fails after 60 s.
members_up() {
  local scheme=$1 deadline=$((SECONDS + 60)) n up; shift
  while :; do
    up=0
    for n in "$@"; do
      kill -0 "$(eval echo "\$ETCD_$n")" 2>/dev/null || return 1
      curl -sf "${CURL_ARGS[@]}" "$scheme://127.0.0.1:$(eval echo "\$CLIENT_$n")/health" |
        grep -q '"health":"true"' && up=$((up + 1))
    done
    (( up == $# )) && return 0
    (( SECONDS < deadline )) || fail "etcd members $* not healthy after 60 s"
    sleep 0.05
  done
}
# etcd_members SCHEME NAME...: a cluster of the members NAME... on free loopback ports, every
# member healthy; client ports in CLIENT_<NAME>, peer ports in PEER_<NAME>, the cluster in CLUSTER. A port that another process takes between
# free_ports and etcd's bind makes a member exit ("address already in use"): then the members
# start again on other ports.
etcd_members() {
  local scheme=$1 attempt n i cluster ports logs; shift
  for attempt in 1 2 3; do
    read -r -a ports < <(free_ports $((2 * $#)))
    cluster= i=0
    for n in "$@"; do cluster+="${cluster:+,}$n=http://127.0.0.1:${ports[i + 1]}"; i=$((i + 2)); done
    i=0
    CLUSTER=$cluster
    for n in "$@"; do
      eval "CLIENT_$n=${ports[i]} PEER_$n=${ports[i + 1]}"
      start_etcd "$n" "${ports[i]}" "${ports[i + 1]}" "$cluster" "$scheme"
      i=$((i + 2))
    done
    members_up "$scheme" "$@" && return 0
    logs=()
    for n in "$@"; do
      kill -KILL "$(eval echo "\$ETCD_$n")" 2>/dev/null || true
      wait "$(eval echo "\$ETCD_$n")" || true
      logs+=("$T/etcd.$n.log")
    done
    if ! grep -qs "address already in use" "${logs[@]}"; then
      for n in "$@"; do echo "--- etcd.$n.log" >&2; sed 's/^/    /' "$T/etcd.$n.log" >&2; done
      fail "etcd $* exited"
    fi
    for n in "$@"; do rm -rf "$T/etcd.$n" "$T/etcd.$n.log"; done
  done
  fail "etcd $*: a port was taken each of 3 times"
}
# keys ENDPOINT: every key ddprun keeps in this etcd.
keys() { ETCDCTL_API=3 etcdctl --endpoints="$1" get --prefix /ddprun/ --keys-only | sed '/^$/d'; }
