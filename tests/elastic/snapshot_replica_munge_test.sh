#!/usr/bin/env bash
# The snapshot folder's copies authenticated with MUNGE (issue 57, item 3), against a real munged
# this test starts: two nodes, each in a mount namespace of its own (a private /dev/shm, where
# DDPRUN_SNAPSHOT_DIR is), no secret: rank 0 saves a checkpoint and every rank finds it in its
# own folder. Then an open rendezvous (auth=none): the files stay on their node, said in one line
# that names what to set. (A replicator of another job, another uid or a secret refused: the unit
# tests, tests/elastic/replicator_test.cpp.)
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
can_nsnode || skip "needs root and unshare -m: each node runs in a mount namespace of its own"
source "$DDPRUN_TESTS_DIR/elastic/munge_lib.sh"  # munge installed; else skipped
start_munged
NSNODE_SHARED=$M  # the nodes reach this munged, as a cluster's nodes each reach their own
unset DDPRUN_RDZV_SECRET

# Rank 0 saves (a temporary name, renamed); every rank waits until its own folder holds the
# checkpoint (at most 60 s) and writes what it read to $T/seen.NODE.PID.
worker saver <<'SH'
#!/bin/sh
d=$DDPRUN_SNAPSHOT_DIR
[ "$RANK" = 0 ] && { printf 'step 7 by %s' "$1" > "$d/ckpt.tmp" && mv "$d/ckpt.tmp" "$d/ckpt"; }
[ "$2" = wait ] || exit 0
tries=0
until [ -e "$d/ckpt" ]; do
  tries=$((tries + 1))
  [ "$tries" -lt 1200 ] || { echo "no checkpoint in $d after 60 s: $(ls -la "$d")" >&2; exit 1; }
  sleep 0.05
done
{ cat "$d/ckpt"; echo; } > "$T/seen.$1.$$"
SH

job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=replica-munge-$$
     --rdzv_conf=auth=munge,munge_socket=$M/munge.socket,join_timeout=60)
nsnode 127.0.0.2 a "${job[@]}" "$T/saver" a wait
nsnode 127.0.0.3 b "${job[@]}" "$T/saver" b wait
finish_within 120 a
finish_within 120 b
expect_eq "$RC_a $RC_b" "0 0" "the MUNGE job ($(show a b))"
saver=$(cat "$T"/seen.*.* | sort -u)
[[ $saver == "step 7 by "[ab] ]] || fail "what the ranks read: '$saver' ($(show a b))"
expect_eq "$(cat "$T"/seen.b.* | wc -l)" 2 "ranks of node b that read the checkpoint in their own folder"
expect_eq "$(cat "$T"/seen.a.* | wc -l)" 2 "ranks of node a that read the checkpoint in their own folder"
for n in a b; do
  expect_in "$T/$n.err" "the rendezvous is authenticated with MUNGE \\(run replica-munge-$$\\)"
  expect_not_in "$T/$n.err" "snapshots are not copied"
  expect_not_in "$T/$n.err" "refused a connection"
done
ok "MUNGE, no secret: rank 0's checkpoint reached the folder of the other node, each in its own mount namespace"

# An open rendezvous: nothing copied, one line that says what to set; the job runs.
next_port
open=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=replica-open-$$
      --rdzv_conf=auth=none,join_timeout=60)
nsnode 127.0.0.2 c "${open[@]}" "$T/saver" c no
nsnode 127.0.0.3 d "${open[@]}" "$T/saver" d no
finish_within 120 c
finish_within 120 d
expect_eq "$RC_c $RC_d" "0 0" "the open job ($(show c d))"
for n in c d; do
  expect_eq "$(grep -c "snapshots are not copied to the other nodes" "$T/$n.err")" 1 "node $n's line ($(show "$n"))"
  expect_in "$T/$n.err" "give every node the same secret with --rdzv_conf secret_file=PATH or DDPRUN_RDZV_SECRET, or use MUNGE"
done
ok "an open rendezvous: the files stay on their node, said once with what to set"
