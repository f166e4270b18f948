#!/usr/bin/env bash
# The authenticated rendezvous with real ddprun processes on loopback addresses (127.0.0.2, .3)
# and rdzv_peer.py as the stranger, the forger, the squatter and the flood.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
peer=(python3 "$DDPRUN_SOURCE_DIR/tests/elastic/rdzv_peer.py")
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
printf 'the-jobs-secret\n' > "$T/secret"; chmod 600 "$T/secret"

worker dump <<'SH'
#!/bin/sh
echo "$RANK $WORLD_SIZE $MASTER_ADDR $TORCHELASTIC_RUN_ID" > "$T/env.$RANK"
echo "$RANK" >> "$T/starts"
env > "$T/environ.$RANK"
[ -z "${WAIT_RELEASE:-}" ] || while [ ! -e "$T/release" ]; do sleep 0.05; done
SH

# 1. The secret from a file on one node and from DDPRUN_RDZV_SECRET on the other: the job runs,
# no warning, and the workers never see the secret.
next_port
job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=authjob)
node 127.0.0.2 a "${job[@]}" --rdzv_conf=secret_file=$T/secret "$T/dump"
DDPRUN_RDZV_SECRET=the-jobs-secret node 127.0.0.3 b "${job[@]}" "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "authenticated pair ($(cat "$T/a.err" "$T/b.err"))"
expect_eq "$(cat "$T"/env.* | sort | tr '\n' ' ')" "0 4 127.0.0.2 authjob 1 4 127.0.0.2 authjob 2 4 127.0.0.2 authjob 3 4 127.0.0.2 authjob " "ranks"
! grep -l "the-jobs-secret\|DDPRUN_RDZV_SECRET" "$T"/environ.* "$T"/a.* "$T"/b.* || fail "the secret reached a worker or the output"
expect_not_in "$T/a.err" "rendezvous is open"
"$DDPRUN" --print_config --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=x \
  --rdzv_conf=secret_file=$T/secret "$T/dump" > "$T/config.json"
expect_not_in "$T/config.json" "the-jobs-secret"
ok "secret from secret_file and DDPRUN_RDZV_SECRET: the job runs; workers, output and --print_config never show it"

# 2. Without a secret: it works as torchrun's, with one warning line per node. Node 0 of a
# static job listens on --master_addr's address, not 0.0.0.0, even without --local_addr.
next_port; rm -f "$T"/env.*
job=(--nnodes=2 --nproc_per_node=1 --master_addr=127.0.0.2 --master_port=$port)
WAIT_RELEASE=1 "$DDPRUN" "${job[@]}" --node_rank=0 "$T/dump" >"$T/a.out" 2>"$T/a.err" &
PID_a=$!
WAIT_RELEASE=1 node 127.0.0.3 b "${job[@]}" --node_rank=1 "$T/dump"
wait_for 20 test -e "$T/env.1"
expect_eq "$(ss -Hltn "sport = :$port" | awk '{print $4}')" "127.0.0.2:$port" "the static host's listening address"
touch "$T/release"
finish a; finish b
rm "$T/release"
expect_eq "$RC_a $RC_b" "0 0" "open pair"
for n in a b; do expect_eq "$(grep -c "warning: the rendezvous is open" "$T/$n.err")" 1 "warning lines of $n"; done
ok "no secret: the job runs, one warning line that the rendezvous is open on each node; listening on 127.0.0.2"

# 3. Strangers: a ddprun with a wrong secret, one with none, and a raw join are refused and told
# nothing about the job, which runs unchanged.
next_port; rm -f "$T"/env.* "$T/starts"
job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=secretjob42
     --max_restarts=3 --rdzv_conf=last_call_timeout=1)
export WAIT_RELEASE=1  # the workers run until the strangers are done
DDPRUN_RDZV_SECRET=the-jobs-secret node 127.0.0.2 a "${job[@]}" "$T/dump"
DDPRUN_RDZV_SECRET=the-jobs-secret node 127.0.0.3 b "${job[@]}" "$T/dump"
wait_for 20 test -e "$T/env.3"
DDPRUN_RDZV_SECRET=a-guess node 127.0.0.4 wrong "${job[@]}" "$T/dump"
node 127.0.0.5 none "${job[@]}" "$T/dump"
"${peer[@]}" stranger 127.0.0.2 $port --secret=a-guess > "$T/raw-wrong.out" 2>&1
"${peer[@]}" stranger 127.0.0.2 $port --nnodes=2 > "$T/raw-none.out" 2>&1
finish wrong; finish none
touch "$T/release"
finish a; finish b
unset WAIT_RELEASE; rm "$T/release"
expect_eq "$RC_a $RC_b" "0 0" "the job with strangers around ($(cat "$T/a.err"))"
expect_eq "$(cat "$T"/env.* | awk '{print $2}' | sort -u)" "4" "world size unchanged"
expect_eq "$(wc -l < "$T/starts")" 4 "worker starts (one round, no restart)"
expect_eq "$RC_wrong $RC_none" "69 69" "strangers' exit codes"
expect_in "$T/wrong.err" "did not prove that it knows the job's secret"
expect_in "$T/none.err" "failed: the rendezvous needs the job.s secret and this node has none"
expect_in "$T/raw-wrong.out" "server proof ok: False"
expect_in "$T/raw-wrong.out" "authentication failed: its proof does not match the job's secret"
expect_in "$T/raw-none.out" "needs the job's secret"
for f in wrong.err none.err raw-wrong.out raw-none.out; do
  expect_not_in "$T/$f" "secretjob42|\"max_restarts\"|\"world_size\"|\"assign"
done
expect_in "$T/a.err" "refused a rendezvous connection from 127.0.0.[45]"
ok "strangers with a wrong secret and with none are refused, learn nothing, and the job runs unchanged"

# 4. An authenticated connection that reports a failure of another node's worker is refused
# (closed as a lost node); the forged failure never ends the job.
next_port; rm -f "$T"/env.*
job=(--nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=forged
     --rdzv_conf=last_call_timeout=3)
export WAIT_RELEASE=1  # the workers run until the forger is done
DDPRUN_RDZV_SECRET=the-jobs-secret node 127.0.0.2 a "${job[@]}" "$T/dump"
DDPRUN_RDZV_SECRET=the-jobs-secret node 127.0.0.3 b "${job[@]}" "$T/dump"
"${peer[@]}" forge 127.0.0.2 $port --secret=the-jobs-secret --run-id=forged --nnodes=2:3 > "$T/forge.out" 2>&1
touch "$T/release"
finish a; finish b
unset WAIT_RELEASE; rm "$T/release"
expect_eq "$RC_a $RC_b" "0 0" "the job after a forged failure ($(cat "$T/a.err" "$T/forge.out"))"
expect_in "$T/forge.out" "forging a failure of rank"
expect_in "$T/forge.out" "closed by peer"
expect_in "$T/a.err" "was lost: it sent a bad 'worker_failed' message: it reports worker rank [0-9]+ of node group rank [0-9]+, not one of its own"
expect_not_in "$T/a.err" "exit code 7|forged"
ok "a failure report for another node's worker is refused and closes the forger's connection"

# 5. A program squatting on the endpoint cannot serve a job with a secret: the node refuses it
# and says so, and proves nothing to it.
next_port
"${peer[@]}" squat 127.0.0.2 $port --secret=squatters-guess > "$T/squat.out" 2>&1 &
squatter=$!
wait_for 10 grep -qs listening "$T/squat.out"
run_ddprun squatted --local_addr=127.0.0.2 --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port \
  --rdzv_id=sq --rdzv_conf=secret_file=$T/secret "$T/dump"
expect_eq "$RC" 69 "exit code against a squatter"
expect_in "$T/squatted.err" "the rendezvous at 127.0.0.2:$port did not prove that it knows the job's secret"
expect_in "$T/squat.out" "received .*\"type\":\"hello\""
kill $squatter; wait $squatter || true
expect_not_in "$T/squat.out" "\"type\":\"(proof|join)\""
ok "a squatter on the endpoint is refused by the real node, which says so"

# 6. At a small file limit, hundreds of idle connections: no busy loop, and the job still
# restarts its worker. (a) the default cap on connections; (b) no cap to speak of, so accept()
# runs out of descriptors.
worker flaky <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/attempt"
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && { sleep "$FAIL_AFTER"; exit 3; }
exec sleep 6
SH
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for variant in cap emfile; do
  next_port; rm -f "$T/attempt"
  conf=last_call_timeout=0.5,auth_timeout=2
  [[ $variant == emfile ]] && conf+=,max_connections=1000
  export FAIL_AFTER=$([[ $variant == cap ]] && echo 1.5 || echo 7)
  ( ulimit -n 64; DDPRUN_RDZV_SECRET=the-jobs-secret exec "$DDPRUN" --local_addr=127.0.0.2 --nnodes=1:2 \
      --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=fd --max_restarts=1 \
      --rdzv_conf=$conf "$T/flaky" >"$T/fd.out" 2>"$T/fd.err" ) &
  host=$!
  wait_for 10 test -e "$T/attempt"
  "${peer[@]}" flood 127.0.0.2 $port 300 5 > "$T/flood.out" 2>&1 &
  flood=$!
  sleep 1; before=$(cpu_ticks $host); sleep 2; after=$(cpu_ticks $host)
  wait $flood
  rc=0; wait $host || rc=$?
  expect_eq "$rc" 0 "fd-limit job ($variant): $(cat "$T/fd.err")"
  expect_eq "$(tr '\n' ' ' < "$T/attempt")" "0 1 " "attempts ($variant)"
  (( after - before < 50 )) || fail "the host used $((after - before)) ticks of CPU in 2 s of flood ($variant)"
  # Every idle connection is closed: by the cap or the descriptor limit, else at auth_timeout.
  [[ $variant == cap ]] && expect_in "$T/flood.out" "closed by host 300$"
  expect_in "$T/flood.out" "closed by host [1-9]"
  if [[ $variant == emfile ]]; then
    expect_eq "$(grep -c "out of file descriptors" "$T/fd.err")" 1 "one line at the descriptor limit"
  fi
done
unset FAIL_AFTER
ok "300 idle connections at ulimit -n 64: no busy loop, idle ones closed, the worker restarts"

# 7. Claims to host the rendezvous: the host knows its own connection (it made it, in its own
# process) and takes no node's word for it. A stranger in an open job and an insider that knows
# the job's secret each join saying they host it, with the job's run id and --nnodes, and stay
# connected: both are refused with the reason (before, the host gave its own finish to the
# stranger's connection and hung), the host says so, and the real job ends normally, in one
# round. A version of 2^32+8 is refused as that version, not read as 8 (the current one).
# claim.out goes before each variant: the claimer's shell opens it (and so empties it) only once
# it runs, so the wait for its finish could read the last variant's and go on while the claimer
# had not connected yet; the job then ended, and its host with it, before the claim was made.
for variant in stranger insider; do
  next_port; rm -f "$T"/env.* "$T/starts" "$T/claim.out" "$T/version.out"
  job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=claimed)
  peer_secret=()
  if [[ $variant == insider ]]; then export DDPRUN_RDZV_SECRET=the-jobs-secret; peer_secret=(--secret=the-jobs-secret); fi
  export WAIT_RELEASE=1  # the workers run until the claims are done
  node 127.0.0.2 a "${job[@]}" "$T/dump"
  node 127.0.0.3 b "${job[@]}" "$T/dump"
  wait_for 20 test -e "$T/env.3"
  "${peer[@]}" stranger 127.0.0.2 $port "${peer_secret[@]}" --claim-host --run-id=claimed --nnodes=2 --wait=30 \
    > "$T/claim.out" 2>&1 &
  claimer=$!
  wait_for 20 grep -qs '"type":"finish"' "$T/claim.out"
  "${peer[@]}" stranger 127.0.0.2 $port "${peer_secret[@]}" --version=4294967304 --run-id=claimed --nnodes=2 \
    > "$T/version.out" 2>&1
  touch "$T/release"
  finish_within 30 a; finish_within 30 b
  kill $claimer 2>/dev/null || true; wait $claimer || true
  unset WAIT_RELEASE DDPRUN_RDZV_SECRET; rm "$T/release"
  expect_eq "$RC_a $RC_b" "0 0" "the job with a claim to host it ($variant; $(show a b; cat "$T/claim.out"))"
  expect_eq "$(cat "$T"/env.* | sort | tr '\n' ' ')" "0 4 127.0.0.2 claimed 1 4 127.0.0.2 claimed 2 4 127.0.0.2 claimed 3 4 127.0.0.2 claimed " "ranks and MASTER_ADDR ($variant)"
  expect_eq "$(wc -l < "$T/starts")" 4 "worker starts (one round, no restart; $variant)"
  [[ $variant == insider ]] && expect_in "$T/claim.out" "server proof ok: True"
  expect_in "$T/claim.out" "this node says it hosts the rendezvous, but the rendezvous runs in the launcher of"
  expect_eq "$(grep -cE "refused a rendezvous connection from 127\.0\.0\.[0-9]+:[0-9]+: this node says it hosts the rendezvous" "$T/a.err")" 1 \
    "the host's lines about the claim ($variant)"
  expect_in "$T/version.out" "this node speaks rendezvous protocol version 4294967304 but the rendezvous host speaks version [0-9]+"
  expect_in "$T/a.err" "refused a rendezvous connection from .*protocol version 4294967304"
done
ok "a stranger (no secret) and an insider (with it) claiming to host are refused; the job ends normally; version 2^32+8 refused"

# libcrypto is opened only by a run that authenticates: where it cannot be loaded (hidden by
# /dev/null bound over it in a mount namespace of this command alone), a run with a secret ends
# at once with one line and exit 69; runs without a secret never need it. Root only.
# (awk reads all of ldconfig's output: leaving early would kill ldconfig with SIGPIPE.)
crypto_lib=$(ldconfig -p | awk '/libcrypto\.so\.3 .*x86-64/ && !found {print $NF; found = 1}')
if [[ $(id -u) -eq 0 && -n "$crypto_lib" ]]; then
  without_crypto() { unshare -m bash -c 'mount --bind /dev/null "$(readlink -f "$1")" && shift && exec "$@"' _ "$crypto_lib" "$@"; }
  next_port
  set +e
  DDPRUN_RDZV_SECRET=the-jobs-secret without_crypto "$DDPRUN" --nnodes=2 --rdzv_backend=c10d \
    --rdzv_endpoint=127.0.0.2:$port --rdzv_id=nocrypto "$T/dump" >"$T/nocrypto.out" 2>"$T/nocrypto.err"
  rc=$?
  set -e
  expect_eq "$rc" 69 "exit code without libcrypto ($(cat "$T/nocrypto.err"))"
  expect_in "$T/nocrypto.err" "needs OpenSSL's libcrypto.so.3 or libcrypto.so.1.1, neither of which could be loaded"
  expect_eq "$(grep -c libcrypto "$T/nocrypto.err")" 1 "lines about libcrypto"
  without_crypto "$DDPRUN" --version >/dev/null || fail "ddprun --version needs libcrypto"
  without_crypto "$DDPRUN" --nproc_per_node=2 /bin/true 2>/dev/null || fail "a one-node run needs libcrypto"
  ok "libcrypto missing: $(grep -m1 libcrypto "$T/nocrypto.err")"
else
  echo "note: libcrypto-missing case skipped (needs root and libcrypto.so.3)"
fi

# OpenSSL 1.1 (RHEL 8, Ubuntu 20.04): with libcrypto.so.3 hidden and Debian 11's libcrypto.so.1.1
# (which scripts/install-deps.sh unpacks, never installs) on LD_LIBRARY_PATH, the authenticated
# pair runs, and ddprun has 1.1 mapped while its workers run.
openssl11=${DDPRUN_OPENSSL11_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ddprun/openssl1.1}/usr/lib/x86_64-linux-gnu
if [[ $(id -u) -eq 0 && -n "$crypto_lib" && -e $openssl11/libcrypto.so.1.1 ]]; then
  cat >"$T/ddprun-openssl11" <<SH
#!/bin/sh
exec unshare -m sh -c 'mount --bind /dev/null "\$0" && exec "\$@"' "$(readlink -f "$crypto_lib")" \
  env LD_LIBRARY_PATH="$openssl11" "$DDPRUN" "\$@"
SH
  chmod +x "$T/ddprun-openssl11"
  next_port; rm -f "$T"/env.* "$T/starts" "$T/release"
  job=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=openssl11)
  export WAIT_RELEASE=1
  DDPRUN=$T/ddprun-openssl11 DDPRUN_RDZV_SECRET=the-jobs-secret node 127.0.0.2 a "${job[@]}" "$T/dump"
  DDPRUN=$T/ddprun-openssl11 DDPRUN_RDZV_SECRET=the-jobs-secret node 127.0.0.3 b "${job[@]}" "$T/dump"
  wait_for 20 test -e "$T/env.1"
  grep -q "libcrypto.so.1.1" "/proc/$PID_a/maps" || fail "ddprun did not load libcrypto.so.1.1 ($(grep libcrypto "/proc/$PID_a/maps"))"
  ! grep -q "libcrypto.so.3" "/proc/$PID_a/maps" || fail "ddprun loaded libcrypto.so.3 though it was hidden"
  touch "$T/release"
  finish a; finish b
  rm "$T/release"; unset WAIT_RELEASE
  expect_eq "$RC_a $RC_b" "0 0" "authenticated pair with OpenSSL 1.1 ($(cat "$T/a.err" "$T/b.err"))"
  ok "OpenSSL 1.1's libcrypto.so.1.1 (libcrypto.so.3 hidden): the authenticated pair runs"
else
  echo "note: OpenSSL 1.1 case skipped (needs root, libcrypto.so.3 to hide and $openssl11/libcrypto.so.1.1: scripts/install-deps.sh)"
fi

wait_for 10 no_leftovers
