#!/usr/bin/env bash
# The snapshot folder replicated between nodes (issue 57, item 3): nodes on one machine, each in a
# mount namespace of its own with a private /tmp, /dev/shm (where DDPRUN_SNAPSHOT_DIR is), /run and
# /var/tmp (nsnode), so that only ddprun's replication can carry a file from one node's folder to
# another's, as on a cluster ($T, bound into every node's namespace, is the test's own channel). A job of 3 nodes and a hot spare:
# rank 0 alone saves a checkpoint; every rank of every node finds it in its own folder; node c's
# ddprun is SIGKILLed; the spare that takes its place finds the checkpoint in its folder before
# its workers start, and every rank of the next round reads it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

can_nsnode || skip "needs root and unshare -m: each node runs in a mount namespace of its own"

# The job's worker: rank 0 saves (a temporary name, renamed) unless its folder holds the
# checkpoint; every rank waits until its own folder holds it and writes what it read to
# $T/seen.NODE.PID; in the round after the test made $T/killed, it exits 0, else it runs until
# stopped.
worker saver <<'SH'
#!/bin/sh
d=$DDPRUN_SNAPSHOT_DIR
if [ "$RANK" = 0 ] && [ ! -e "$d/ckpt" ]; then
  printf 'step 42 by %s' "$1" > "$d/ckpt.tmp" && mv "$d/ckpt.tmp" "$d/ckpt"
fi
tries=0
until [ -e "$d/ckpt" ]; do
  tries=$((tries + 1))
  [ "$tries" -lt 1200 ] || { echo "no checkpoint in $d after 60 s: $(ls -la "$d")" >&2; exit 1; }
  sleep 0.05
done
{ cat "$d/ckpt"; echo; } > "$T/seen.$1.$$"
[ -e "$T/killed" ] && exit 0
exec sleep 600
SH

# Nothing of the job left but etcd, which the etcd run stops at its end.
no_job_left() { [[ -z "$(leftovers | awk '$3 !~ /(^|\/)etcd$/')" ]]; }

# scenario: the job above on the backend in RDZV (BACKEND names it in messages).
scenario() {
  rm -f "$T"/seen.* "$T/killed"
  job=(--nnodes=3 --nproc_per_node=1 "${RDZV[@]}" --rdzv_conf=join_timeout=60,heartbeat_timeout=3,spares=1)
  nsnode 127.0.0.2 a "${job[@]}" "$T/saver" a
  nsnode 127.0.0.3 b "${job[@]}" "$T/saver" b
  nsnode 127.0.0.4 c "${job[@]}" "$T/saver" c
  seen_by() { cat "$T"/seen."$1".* 2>/dev/null; }
  all_seen() { [[ -n $(seen_by a) && -n $(seen_by b) && -n $(seen_by c) ]]; }
  poll_until 120 all_seen || { show a b c >&2; fail "not every node found the checkpoint in its own folder"; }
  saver=$(cat "$T"/seen.a.*)
  [[ $saver == "step 42 by "[abc] ]] || fail "the checkpoint read: '$saver'"
  for n in a b c; do expect_eq "$(seen_by "$n")" "$saver" "what node $n's rank read in its own folder"; done
  ok "[$BACKEND] rank 0's checkpoint reached the folder of every node, each in its own mount namespace"

  # The spare joins; c is lost; the spare takes its place with the checkpoint in its folder.
  nsnode 127.0.0.5 d "${job[@]}" --event_log="$T/d.events" "$T/saver" d
  wait_for 60 grep -q "this node is a hot spare" "$T/d.err"
  touch "$T/killed"
  if [[ $saver == *" by c" ]]; then victim=b; else victim=c; fi  # never the node whose rank 0 saved it first
  kill -KILL "$(eval echo "\$PID_$victim")"
  finish "$victim"
  for n in a b c d; do [[ $n == "$victim" ]] || finish_within 120 "$n"; done
  for n in a b c d; do
    [[ $n == "$victim" ]] && continue
    expect_eq "$(eval echo "\$RC_$n")" 0 "node $n's exit ($(show "$n"))"
  done
  expect_eq "$(seen_by d)" "$saver" "what the spare's rank read in its own folder"
  expect_in "$T/d.err" "snapshots: 1 file fetched from the other nodes"
  expect_in "$T/d.events" '"event":"snapshot_restore".*"fetched":1'
  for n in a b c; do
    [[ $n == "$victim" ]] && continue
    expect_eq "$(seen_by "$n" | sort -u)" "$saver" "what node $n's ranks read in both rounds"
  done
  ok "[$BACKEND] node $victim SIGKILLed: the spare took its place with the checkpoint in its own folder before its workers started"
  wait_for 30 no_job_left
}

# --snapshot_replicas=1: each rank saves a shard of its own (shard.GROUP_RANK, the node's name in
# it); a node's folder shows its own shard only, its copy held by the next node. In the round
# after $T/killed, each rank reads its group rank's shard (never saves it) and the node's listing.
worker sharder <<'SH'
#!/bin/sh
d=$DDPRUN_SNAPSHOT_DIR
f=$d/shard.$GROUP_RANK
if [ ! -e "$T/killed" ]; then
  printf 'shard %s by %s' "$GROUP_RANK" "$1" > "$f.tmp" && mv "$f.tmp" "$f"
  touch "$T/saved.$1"
  exec sleep 600
fi
{ cat "$f" 2>/dev/null || printf 'no %s' "$f"; printf ' | %s\n' "$(ls "$d" | tr '\n' ' ')"; } > "$T/seen.$1.$GROUP_RANK"
exit 0
SH

# The held copy of rank R's shard in the folder of node N (its ddprun's mount namespace).
held_on() { compgen -G "/proc/$(eval echo "\$PID_$1")/root/dev/shm/ddprun-snapshots*/.ddprun-incoming/held/$2/shard.$2" >/dev/null; }

# scenario_k: 3 nodes and a spare with --snapshot_replicas=1; VICTIM's ddprun is SIGKILLed; the
# node that runs each group rank next shows that rank's shard, and only it.
scenario_k() {
  local victim=$1
  rm -f "$T"/seen.* "$T"/saved.* "$T/killed"
  job=(--nnodes=3 --nproc_per_node=1 "${RDZV[@]}" --rdzv_conf=join_timeout=60,heartbeat_timeout=3,spares=1
       --snapshot_replicas=1)
  nsnode 127.0.0.2 a "${job[@]}" "$T/sharder" a
  nsnode 127.0.0.3 b "${job[@]}" "$T/sharder" b
  nsnode 127.0.0.4 c "${job[@]}" "$T/sharder" c
  # Group ranks by address: a 0, b 1, c 2; rank R's copy is held by rank R+1's node.
  saved() { [[ -e $T/saved.a && -e $T/saved.b && -e $T/saved.c ]]; }
  poll_until 120 saved || { show a b c >&2; fail "not every rank saved its shard"; }
  copies() { held_on b 0 && held_on c 1 && held_on a 2; }
  poll_until 60 copies || { show a b c >&2; fail "a shard's copy is not held by the next node"; }
  ! held_on c 0 || fail "rank 0's shard is held by two nodes with --snapshot_replicas=1"
  local r=0 n names=(a b c)
  for n in a b c; do
    expect_eq "$(ls /proc/$(eval echo "\$PID_$n")/root/dev/shm/ddprun-snapshots*/ | tr '\n' ' ')" "shard.$r " \
      "node $n's folder shows its own shard only"
    r=$((r + 1))
  done
  ok "[--snapshot_replicas=1] each shard shown on its node only, its copy held by the next node"

  nsnode 127.0.0.5 d "${job[@]}" "$T/sharder" d
  wait_for 60 grep -q "this node is a hot spare" "$T/d.err"
  touch "$T/killed"
  kill -KILL "$(eval echo "\$PID_$victim")"
  finish "$victim"
  for n in a b c d; do [[ $n == "$victim" ]] || finish_within 120 "$n"; done
  for n in a b c d; do
    [[ $n == "$victim" ]] && continue
    expect_eq "$(eval echo "\$RC_$n")" 0 "node $n's exit ($(show "$n"))"
  done
  # Ranks by address among the survivors and the spare: rank R shows the shard rank R's node saved.
  r=0
  for n in a b c d; do
    [[ $n == "$victim" ]] && continue
    expect_eq "$(cat "$T/seen.$n.$r")" "shard $r by ${names[$r]} | shard.$r " \
      "what node $n (now rank $r) shows"
    r=$((r + 1))
  done
  ok "[--snapshot_replicas=1] node $victim SIGKILLed: each rank's node shows that rank's shard before its workers start"
  wait_for 30 no_job_left
}

export DDPRUN_RDZV_SECRET=replica-test-secret
BACKEND=c10d RDZV=(--rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=replica-$$)
scenario
next_port
RDZV=(--rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=replica-k-$$)
scenario_k c  # the spare runs rank 2
next_port
RDZV=(--rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=replica-k2-$$)
scenario_k b  # c runs rank 1 (b's shard), the spare rank 2 (c's)
# etcd: the secret authenticates the copies, as with c10d; etcd's own TLS and users guard etcd.
if command -v etcd >/dev/null && command -v etcdctl >/dev/null && command -v curl >/dev/null; then
  source "$DDPRUN_TESTS_DIR/elastic/etcd_lib.sh"
  etcd_members http solo
  BACKEND=etcd RDZV=(--rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:$CLIENT_solo --rdzv_id=replica-etcd-$$)
  scenario
  kill "$ETCD_solo"; wait "$ETCD_solo" 2>/dev/null || true
else
  echo "skipped: the etcd run (needs etcd, etcdctl and curl)"
fi
