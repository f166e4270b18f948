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

source "$DDPRUN_TESTS_DIR/elastic/etcd_lib.sh"

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

# suspect_after_lead: node c's worker segfaults at once in the first round (once $T/q.go exists);
# in a later round of three nodes, once $T/q.go2 exists. In a round of two, every worker waits for
# $T/q.release and exits 0; the others run until stopped.
worker suspect_after_lead <<'SH'
#!/bin/sh
echo "$WORLD_SIZE $GROUP_WORLD_SIZE $TORCHELASTIC_RESTART_COUNT" >> "$T/q.$1.$$"
if [ "$GROUP_WORLD_SIZE" = 2 ]; then
  exec "$T/file_made" "$T/q.release"
fi
if [ "$1" = c ]; then
  if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then go="$T/q.go"; else go="$T/q.go2"; fi
  "$T/file_made" "$go" || exit 1
  kill -SEGV $$
fi
exec sleep 120
SH

# 0. The history a suspect node's quarantine rests on survives a new leader: node c's worker
# segfaults under leader a, a is SIGKILLed, and c's second segfault, under the next leader (any
# of b, c, d; c hands the lead over when it is quarantined), quarantines it, and counts as the
# second failure in a row of the crash-loop breaker: c exits 71, b and spare d finish the job at two nodes (--nnodes=2:3; a new leader's first round of fewer than MAX
# nodes waits out last_call_timeout).
# d.err goes too: the wait for d's "hot spare" line must not read an earlier scenario's.
rm -f "$T"/q.* "$T"/[abcd].events "$T/d.err"
backend_job lead_history
job=(--nnodes=2:3 --nproc_per_node=1 --max_restarts=5 "${RDZV[@]}"
     --rdzv_conf=join_timeout=60,last_call_timeout=3,heartbeat_timeout=3,spares=1)
node 127.0.0.2 a "${job[@]}" "$T/suspect_after_lead" a
backend_first_joined
node 127.0.0.3 b "${job[@]}" --event_log="$T/b.events" "$T/suspect_after_lead" b
node 127.0.0.4 c "${job[@]}" "$T/suspect_after_lead" c
running() { [[ $(cat "$T"/q.[abc].* 2>/dev/null | grep -c "^3 3 $1\$") == 3 ]]; }
wait_for 60 running 0
node 127.0.0.5 d "${job[@]}" --event_log="$T/d.events" "$T/suspect_after_lead" d
wait_for 60 grep -qs "this node is a hot spare" "$T/d.err"
touch "$T/q.go"
wait_for 60 running 1
kill -KILL "$PID_a"; finish a
d_running() { grep -qs '^3 3 1$' "$T"/q.d.*; }
wait_for 60 d_running
touch "$T/q.go2"
two_running() { [[ $(cat "$T"/q.[bd].* 2>/dev/null | grep -c '^2 2 2$') == 2 ]]; }
wait_for 60 two_running
touch "$T/q.release"
for n in b c d; do finish_within 60 "$n"; done
expect_eq "$RC_b $RC_c $RC_d" "0 71 0" "[etcd] c quarantined under the next leader ($(show b c d))"
expect_in "$T/c.err" "is quarantined: its workers were the root cause of 2 hardware-like failures within 600 s \(segfault, segfault\)"
for n in b d; do expect_in "$T/$n.events" '"event":"quarantined".*127\.0\.0\.4'; done
# The crash-loop count went over to the next leader too: the second failure is the second in a row.
expect_in "$T/b.err" "restarting workers \(restart 2 of 5\): .*no progress since the start \(2 in a row"
wait_for 10 no_job_left
backend_check_end lead_history lead_history
ok "[etcd] a suspect node's history survives a new leader: its second segfault, under the next leader, quarantines it"

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
