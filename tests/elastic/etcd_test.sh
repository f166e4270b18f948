#!/usr/bin/env bash
# --rdzv_backend=etcd: real ddprun processes as nodes on distinct loopback addresses, meeting in a
# real etcd (started here on free loopback ports, its data in the test's folder) through etcd's
# v3 API. Skipped when etcd is not installed (Debian: etcd-server, etcd-client).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
command -v etcd >/dev/null || skip "needs etcd (apt-get install etcd-server etcd-client)"
command -v etcdctl >/dev/null || skip "needs etcdctl (apt-get install etcd-client)"
command -v curl >/dev/null || skip "needs curl to check etcd's health"
command -v openssl >/dev/null || skip "needs openssl to make the TLS test's certificates"

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
# member healthy; client ports in CLIENT_<NAME>. A port that another process takes between
# free_ports and etcd's bind makes a member exit ("address already in use"): then the members
# start again on other ports.
etcd_members() {
  local scheme=$1 attempt n i cluster ports logs; shift
  for attempt in 1 2 3; do
    read -r -a ports < <(free_ports $((2 * $#)))
    cluster= i=0
    for n in "$@"; do cluster+="${cluster:+,}$n=http://127.0.0.1:${ports[i + 1]}"; i=$((i + 2)); done
    i=0
    for n in "$@"; do
      eval "CLIENT_$n=${ports[i]}"
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

etcd_members http solo
E=127.0.0.1:$CLIENT_solo

source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
source "$DDPRUN_TESTS_DIR/elastic/scenarios.sh"

BACKEND=etcd
backend_job() { RUN=$1; RDZV=(--rdzv_backend=etcd --rdzv_endpoint=$E --rdzv_id="$1"); }
leader_is_a() {
  ETCDCTL_API=3 etcdctl --endpoints="$E" get --print-value-only "/ddprun/v1/$RUN/leader" | grep -q -- "-$PID_a-"
}
backend_first_joined() { wait_for 30 leader_is_a; }
# After every scenario, whatever its end (clean, failed, nodes lost), the job's keys are gone
# from etcd. Rank 0's node a is the leader: the survivors say that the leader was lost. A
# stalled node finds its lease gone once resumed.
backend_check_end() {
  case $1 in
    rank0_lost) expect_in "$T/b.err" "leader .* was lost" ;;
    stalled_node) expect_in "$T/c.err" "lease" ;;
  esac
  expect_eq "$(keys "$E")" "" "[etcd] the job's keys in etcd after the scenario $1"
}
# The first node to join leads the job (runs its coordinator) and has the lowest address: the
# node of rank 0 that is lost is the leader, a.
run_scenarios a

# 1. etcd unreachable at the start: one line that names etcd and the flag, exit 69 after join_timeout.
read -r closed < <(free_ports 1)
run_ddprun unreachable --nnodes=2 --rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:$closed --rdzv_id=none \
  --rdzv_conf=join_timeout=2 "$T/dump"
expect_eq "$RC" 69 "exit code with etcd unreachable ($(cat "$T/unreachable.err"))"
expect_in "$T/unreachable.err" "^ddprun: .*could not reach etcd at http://127.0.0.1:$closed within 2 s .*join_timeout"
expect_eq "$(grep -c "could not reach etcd" "$T/unreachable.err")" 1 "lines about etcd"
ok "etcd unreachable: $(grep -m1 "could not reach etcd" "$T/unreachable.err")"

# 2. etcd-v2 is refused with a usage error that says what to use.
run_ddprun v2 --nnodes=2 --rdzv_backend=etcd-v2 --rdzv_endpoint=$E --rdzv_id=v2 "$T/dump"
expect_eq "$RC" 64 "exit code of --rdzv_backend=etcd-v2"
expect_in "$T/v2.err" "etcd-v2.*v2 API.*--rdzv_backend=etcd"
expect_eq "$(wc -l < "$T/v2.err")" 1 "lines of the etcd-v2 error"
ok "etcd-v2: $(cat "$T/v2.err")"

# 2b. libcurl is opened only by a run that uses etcd: where it cannot be loaded (here hidden by
# /dev/null bound over it in a mount namespace of this command alone), one line and exit 69 at
# once, before anything is written to etcd. Root only (the mount namespace).
# (awk reads all of ldconfig's output: leaving early would kill ldconfig with SIGPIPE, which
# pipefail makes this line's failure.)
curl_lib=$(ldconfig -p | awk '/libcurl\.so\.4 .*x86-64/ && !found {print $NF; found = 1}')
if [[ $(id -u) -eq 0 && -n "$curl_lib" ]]; then
  set +e
  unshare -m bash -c 'mount --bind /dev/null "$(readlink -f "$1")" && shift && exec "$@"' _ "$curl_lib" \
    "$DDPRUN" --nnodes=2 --rdzv_backend=etcd --rdzv_endpoint=$E --rdzv_id=nocurl "$T/dump" >"$T/nocurl.out" 2>"$T/nocurl.err"
  RC=$?
  set -e
  expect_eq "$RC" 69 "exit code without libcurl ($(cat "$T/nocurl.err"))"
  expect_in "$T/nocurl.err" "the etcd rendezvous needs libcurl, which could not be loaded"
  expect_eq "$(grep -c libcurl "$T/nocurl.err")" 1 "lines about libcurl"
  expect_eq "$(keys "$E" | grep -c nocurl || true)" 0 "keys of the job without libcurl"
  # A run that does not use etcd never needs it.
  unshare -m bash -c 'mount --bind /dev/null "$(readlink -f "$1")" && shift && exec "$@"' _ "$curl_lib" \
    "$DDPRUN" --version >/dev/null || fail "ddprun --version needs libcurl"
  ok "libcurl missing: $(grep -m1 libcurl "$T/nocurl.err")"
else
  echo "note: libcurl-missing case skipped (needs root and libcurl.so.4)"
fi

# 3. etcd's own users: with the right password the job runs; with a wrong one, one line and 69 at once.
etcd_job=(--rdzv_backend=etcd --rdzv_endpoint=$E --rdzv_conf=join_timeout=60)
ETCDCTL_API=3 etcdctl --endpoints="$E" user add root --new-user-password=rootpw >/dev/null
ETCDCTL_API=3 etcdctl --endpoints="$E" user grant-role root root >/dev/null
ETCDCTL_API=3 etcdctl --endpoints="$E" auth enable >/dev/null
run_ddprun anonymous --nnodes=2 --nproc_per_node=1 "${etcd_job[@]}" --rdzv_id=users "$T/dump"
expect_eq "$RC" 69 "exit code without an etcd user once etcd requires one ($(cat "$T/anonymous.err"))"
expect_in "$T/anonymous.err" "etcd.*(user name is empty|permission denied)" 
rm -f "$T"/env.*
users=(--nnodes=2 --nproc_per_node=1 "${etcd_job[@]}" --rdzv_id=users)
node 127.0.0.2 a "${users[@]}" --rdzv_conf=user=root,password=rootpw "$T/dump"
printf 'rootpw\n' > "$T/etcd-password"; chmod 600 "$T/etcd-password"
node 127.0.0.3 b "${users[@]}" --rdzv_conf=user=root,password_file=$T/etcd-password "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "a job as etcd user root, the password given and from a file ($(show a b))"
expect_eq "$(ls "$T"/env.* | wc -l)" 2 "workers of the job as etcd user root"
run_ddprun badpw "${users[@]}" --rdzv_conf=user=root,password=wrong "$T/dump"
expect_eq "$RC" 69 "exit code with a wrong etcd password ($(cat "$T/badpw.err"))"
expect_in "$T/badpw.err" "refused user 'root'"
expect_eq "$(ETCDCTL_API=3 etcdctl --endpoints="$E" --user=root:rootpw get --prefix /ddprun/ --keys-only | sed '/^$/d')" "" \
  "the job's keys in etcd after a clean end"
ok "etcd users: without one, refused; the job runs as root (password and password_file); a wrong password: $(grep -m1 refused "$T/badpw.err")"

# 4. etcd over TLS with client certificates (mutual TLS): a node with a certificate signed by
# etcd's CA takes part; one without a client certificate cannot reach etcd and says why.
( cd "$T"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca 2>/dev/null
  for who in server client; do
    openssl req -newkey rsa:2048 -nodes -keyout $who.key -out $who.csr -subj /CN=$who 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > $who.ext
    openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $who.pem -days 1 \
      -extfile $who.ext 2>/dev/null
  done )
ETCD_ARGS=(--cert-file "$T/server.pem" --key-file "$T/server.key" --client-cert-auth --trusted-ca-file "$T/ca.pem")
CURL_ARGS=(--cacert "$T/ca.pem" --cert "$T/client.pem" --key "$T/client.key")
etcd_members https tls
ETCD_ARGS=() CURL_ARGS=()
tc=$CLIENT_tls
rm -f "$T"/env.*
tls=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:$tc --rdzv_id=tls)
certs=protocol=https,cacert=$T/ca.pem,cert=$T/client.pem,key=$T/client.key
node 127.0.0.2 a "${tls[@]}" --rdzv_conf=$certs,join_timeout=60 "$T/dump"
node 127.0.0.3 b "${tls[@]}" --rdzv_conf=$certs,join_timeout=60 "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "a job in etcd over mutual TLS ($(show a b))"
expect_eq "$(ls "$T"/env.* | wc -l)" 2 "workers of the job over TLS"
run_ddprun nocert "${tls[@]}" --rdzv_conf=protocol=https,cacert=$T/ca.pem,join_timeout=2 "$T/dump"
expect_eq "$RC" 69 "exit code without a client certificate ($(cat "$T/nocert.err"))"
expect_in "$T/nocert.err" "could not reach etcd at https://127.0.0.1:$tc within 2 s"
ok "etcd over TLS: the job runs with client certificates; without one: exit 69"

# 5. A 3-member etcd cluster loses the member the nodes talk to first, mid-run: the nodes move
# to another member (keep-alives, writes, the watch from where it left off) and finish.
kill -TERM "$ETCD_solo"; wait "$ETCD_solo" || true
etcd_members http m1 m2 m3
c1=$CLIENT_m1 c2=$CLIENT_m2 c3=$CLIENT_m3
worker until_released <<'SH'
#!/bin/sh
echo "$GROUP_WORLD_SIZE" >> "$T/member.$RANK"
while [ ! -e "$T/release" ]; do sleep 0.1; done
exit 0
SH
members=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd
         --rdzv_endpoint=127.0.0.1:$c1,127.0.0.1:$c2,127.0.0.1:$c3 --rdzv_id=members
         --rdzv_conf=join_timeout=60,heartbeat_timeout=5)
node 127.0.0.2 a "${members[@]}" "$T/until_released"
node 127.0.0.3 b "${members[@]}" "$T/until_released"
both_running() { [[ $(cat "$T"/member.* 2>/dev/null | wc -l) == 2 ]]; }
wait_for 60 both_running
kill -KILL "$ETCD_m1"
# Each node's lease, read through member 2: once its remaining TTL has gone up twice since m1
# died, the node has kept it alive through another member (once could be the lease extension that
# comes with a new Raft leader).
# (etcdctl may fail while m2 and m3 elect a new leader: each read is tried again.)
read_leases() {
  leases=$(ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$c2" get --prefix /ddprun/v1/members/nodes/ -w json |
           python3 -c 'import json, sys
print(" ".join(format(int(kv["lease"]), "x") for kv in json.load(sys.stdin)["kvs"]))') &&
    [[ $(wc -w <<<"$leases") == 2 ]]
}
wait_for 30 read_leases
declare -A ttl rises
ttl_rose_twice() {
  local now
  now=$(ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$c2" lease timetolive "$1" |
        sed -n 's/.*remaining(\(-\?[0-9]*\)s).*/\1/p') || return 1
  [[ -n $now ]] || return 1
  [[ -n ${ttl[$1]:-} ]] && (( now > ttl[$1] )) && rises[$1]=$(( ${rises[$1]:-0} + 1 ))
  ttl[$1]=$now
  (( ${rises[$1]:-0} >= 2 ))
}
for lease in $leases; do wait_for 30 ttl_rose_twice "$lease"; done
touch "$T/release"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "job across an etcd member's loss ($(show a b))"
expect_eq "$(cat "$T"/member.* | tr '\n' ' ')" "2 2 " "one round only: the member's loss ended no round"
expect_eq "$(keys "127.0.0.1:$c2")" "" "the job's keys in etcd after a clean end"
ok "3-member etcd, the first member killed mid-run: the job goes on and finishes"
