#!/usr/bin/env bash
# The rendezvous authenticated by MUNGE (--rdzv_conf auth=munge), against a real munged that this
# test starts with a key of its own; the nodes are real ddprun processes on loopback addresses,
# the strangers another uid (nobody), another run, a node with a secret, and a raw peer.
# (Under SLURM, auth=auto picks MUNGE by itself: tests/slurm/ddprun_ranks.sh checks that.)
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/munge_lib.sh"  # root, munge installed; else skipped
start_munged

source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
# nobody's own copy of ddprun in $T: the build folder may be out of its reach (a clone under a
# 0700 folder, as mktemp -d makes, where runuser's exec of ddprun failed with 126).
as_nobody() {
  local addr=$1 name=$2; shift 2
  install -m 755 "$DDPRUN" "$T/ddprun-of-nobody"
  runuser -u nobody -- env TMPDIR=/tmp "$T/ddprun-of-nobody" --local_addr="$addr" "$@" >"$T/$name.out" 2>"$T/$name.err" &
  eval "PID_$name=$!"
}
chmod 755 "$T"

worker dump <<'SH'
#!/bin/sh
echo "$RANK $WORLD_SIZE" > "$T/env.$RANK"
echo "$RANK" >> "$T/starts"
[ -z "$WAIT_RELEASE" ] || while [ ! -e "$T/release" ]; do sleep 0.1; done
SH
chmod 755 "$T/dump"
munge_conf="auth=munge,munge_socket=$M/munge.socket"

# 1. Two nodes with MUNGE: the job runs, each node says so once, no warning.
next_port
job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=mungejob
     --rdzv_conf=$munge_conf)
node 127.0.0.2 a "${job[@]}" "$T/dump"
node 127.0.0.3 b "${job[@]}" "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "MUNGE pair ($(cat "$T/a.err" "$T/b.err"))"
expect_eq "$(cat "$T"/env.* | sort | tr '\n' ' ')" "0 4 1 4 2 4 3 4 " "ranks"
for n in a b; do
  expect_eq "$(grep -c "the rendezvous is authenticated with MUNGE (run mungejob)" "$T/$n.err")" 1 "MUNGE lines of $n"
  expect_not_in "$T/$n.err" "rendezvous is open"
done
ok "auth=munge: two nodes authenticate with the real munged and the job runs"

# 2. Strangers at a running MUNGE job: a ddprun of another uid, a ddprun of another run, a ddprun
# with a secret, and a raw peer without a credential. All are refused; the job runs unchanged.
next_port; rm -f "$T"/env.* "$T/starts"
job=(--nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=mungejob2
     --max_restarts=3 --rdzv_conf=$munge_conf,last_call_timeout=1)
export WAIT_RELEASE=1  # the workers run until the strangers are done
node 127.0.0.2 a "${job[@]}" "$T/dump"
node 127.0.0.3 b "${job[@]}" "$T/dump"
wait_for 30 test -e "$T/env.1"
as_nobody 127.0.0.4 nobody "${job[@]}" "$T/dump"
other=("${job[@]}"); other[4]=--rdzv_id=otherrun
node 127.0.0.5 otherrun "${other[@]}" "$T/dump"
with_secret=("${job[@]}"); with_secret[6]=--rdzv_conf=last_call_timeout=1
DDPRUN_RDZV_SECRET=a-guess node 127.0.0.6 secret "${with_secret[@]}" "$T/dump"
python3 "$DDPRUN_SOURCE_DIR/tests/elastic/rdzv_peer.py" stranger 127.0.0.2 $port --nnodes=2 > "$T/raw.out" 2>&1
finish nobody; finish otherrun; finish secret
touch "$T/release"
finish a; finish b
unset WAIT_RELEASE
expect_eq "$RC_a $RC_b" "0 0" "the job with strangers around ($(cat "$T/a.err"))"
expect_eq "$(wc -l < "$T/starts")" 2 "worker starts (one round of 2 workers, nobody admitted, no restart)"
expect_eq "$RC_nobody $RC_otherrun $RC_secret" "69 69 69" "strangers' exit codes"
expect_in "$T/nobody.err" "refused this node: authentication failed: its MUNGE credential"
expect_in "$T/otherrun.err" "refused this node: authentication failed: its MUNGE credential is not for this job and run"
expect_in "$T/secret.err" "this node uses a secret"
expect_in "$T/raw.out" "authenticates its nodes with MUNGE"
expect_in "$T/a.err" "refused a rendezvous connection from 127.0.0.4"
ok "strangers (another uid, another run, a secret, no credential) are refused; the job runs unchanged"

# 3. A squatter of another uid holds the endpoint before the real host: the real nodes do not
# join it (they cannot read its credential's secret nor it theirs) and end with a rendezvous error.
next_port
job=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=squat
     --rdzv_conf=$munge_conf,is_host=1)
as_nobody 127.0.0.2 squatter "${job[@]}" "$T/dump"
listening() { [[ -n $(ss -Hltn "sport = :$port") ]]; }
wait_for 30 listening
client=("${job[@]}"); client[5]=--rdzv_conf=$munge_conf,is_host=0
node 127.0.0.3 victim "${client[@]}" "$T/dump"
finish victim
kill "$PID_squatter" 2> /dev/null || true
finish squatter
expect_eq "$RC_victim" 69 "the squatter's victim ($(cat "$T/victim.err"))"
expect_in "$T/victim.err" "MUNGE credential"
ok "a squatter of another uid on the endpoint is not joined"

# 4. auth=munge where munged does not answer: one line, exit 64, nothing started.
rc=0
"$DDPRUN" --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=x \
  --rdzv_conf=auth=munge,munge_socket=$M/none.socket "$T/dump" > "$T/nomunge.out" 2> "$T/nomunge.err" || rc=$?
expect_eq "$rc" 64 "auth=munge without munged"
expect_eq "$(wc -l < "$T/nomunge.err")" 1 "lines of the error"
expect_in "$T/nomunge.err" "--rdzv_conf auth=munge: MUNGE cannot be used"
ok "auth=munge without munged: one line and exit 64"
