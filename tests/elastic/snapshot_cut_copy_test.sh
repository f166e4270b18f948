#!/usr/bin/env bash
# A replica node that vanishes mid-copy (issue 57, bad input), with real nodes each in a mount
# namespace of its own (nodes.sh's nsnode) and real workers: a job of 3 nodes (a hosts the
# rendezvous) and 2 hot spares. A copy is held mid-way by stopping (SIGSTOP) its receiver once the
# sender has written past what the sockets buffer, so that the loss lands mid-copy on any machine.
#  1. The receiver lost: a's worker commits a new version of a 96 MiB file while the next node of
#     the ring is stopped, then that node is SIGKILLed: a says one line naming the file and the
#     node; the next round (a spare in its place) starts with the new version on every node.
#  2. The sender lost: a node's worker commits a new version while the next node is stopped; the
#     sender is SIGKILLed and the receiver resumed with part of the copy: the next round's nodes
#     that saw it begin name it lost in one line, and every node keeps the previous whole version.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

can_nsnode || skip "needs root and unshare -m: each node runs in a mount namespace of its own"
command -v nsenter >/dev/null && command -v ss >/dev/null || skip "needs nsenter and ss"

id=snapcut-$$
dir=/dev/shm/ddprun-snapshots.0.$id
size=$((96 << 20))  # past the sockets' buffers (tcp_rmem's 32 MiB at most, here and on CI)
version() { { yes "version $1" || true; } | head -c "$size"; }
for v in 1 2 3; do version "$v" | sha256sum | cut -d' ' -f1 > "$T/v$v.sum"; done
v1=$(cat "$T/v1.sum") v2=$(cat "$T/v2.sum") v3=$(cat "$T/v3.sum")
on_node() { local pid; pid=$(eval echo "\$PID_$1"); shift; nsenter -t "$pid" -m -- "$@"; }
# holds NODE SUM: NODE's folder holds big whole with that checksum.
holds() {
  [[ $(on_node "$1" stat -c %s "$dir/big" 2>/dev/null) == "$size" ]] &&
    [[ $(on_node "$1" sha256sum "$dir/big" | cut -d' ' -f1) == "$2" ]]
}

# The worker: at each start, says its rank and the checksum of big in $T/start.NODE.PID; then,
# for each $T/write.NODE.V, writes version V of big to a temporary name, says so, and renames it
# into place and closes it (the commit) once $T/commit.NODE.V is there; exits 0 once $T/finish is.
worker node <<'SH'
#!/bin/sh
node=$1 d=$DDPRUN_SNAPSHOT_DIR
sum=$( [ -e "$d/big" ] && sha256sum "$d/big" | cut -d' ' -f1 || echo none)
echo "$RANK $sum" > "$T/start.$node.$$.tmp" && mv "$T/start.$node.$$.tmp" "$T/start.$node.$$"
while [ ! -e "$T/finish" ]; do
  for v in 1 2 3; do
    if [ -e "$T/write.$node.$v" ] && [ ! -e "$T/wrote.$node.$v" ]; then
      # Held open until renamed: then its close commits it as big (a close alone would commit big.tmp).
      exec 3>"$d/big.tmp"
      yes "version $v" | head -c $((96 << 20)) >&3
      touch "$T/written.$node.$v"
      until [ -e "$T/commit.$node.$v" ]; do sleep 0.02; done
      mv "$d/big.tmp" "$d/big"
      exec 3>&-
      touch "$T/wrote.$node.$v"
    fi
  done
  sleep 0.05
done
SH

# started NODE...: each NODE's worker of the current round started (a start file newer than $T/round).
started() { local n; for n in "$@"; do [[ -n $(find "$T" -maxdepth 1 -name "start.$n.*" -newer "$T/round") ]] || return 1; done; }
# rank NODE: the rank of NODE's worker of the current round.
rank() { cut -d' ' -f1 "$(find "$T" -maxdepth 1 -name "start.$1.*" -newer "$T/round" | head -1)"; }
read_sum() { cut -d' ' -f2 "$(find "$T" -maxdepth 1 -name "start.$1.*" -newer "$T/round" | head -1)"; }
# next_of NODE NODES...: the node after NODE in the ring of NODES (group-rank order).
next_of() {
  local from=$1 n; shift
  local want=$(( ($(rank "$from") + 1) % $# ))
  for n in "$@"; do [[ $(rank "$n") == "$want" ]] && { echo "$n"; return; }; done
  fail "no node of rank $want among $*"
}
# backed_up NODE PEER_ADDR: NODE's ddprun has more than 1 MiB unsent to PEER_ADDR (its peer stopped).
backed_up() {
  ss -tnpH | awk -v p="pid=$(eval echo "\$PID_$1")," -v to="$2:" \
    'index($0, p) && index($5, to) == 1 && $3 > 1048576 { found = 1 } END { exit !found }'
}
addr_of() { case $1 in a) echo 127.0.0.2 ;; b) echo 127.0.0.3 ;; c) echo 127.0.0.4 ;; d) echo 127.0.0.5 ;; e) echo 127.0.0.6 ;; esac; }
# commit_stopped SENDER RECEIVER V: RECEIVER's ddprun stopped, SENDER's worker commits version V,
# and returns once SENDER's copy to RECEIVER is stuck mid-way.
commit_stopped() {
  touch "$T/write.$1.$3"
  wait_for 60 test -e "$T/written.$1.$3"
  kill -STOP "$(eval echo "\$PID_$2")"
  touch "$T/commit.$1.$3"
  poll_until 60 backed_up "$1" "$(addr_of "$2")" || { kill -CONT "$(eval echo "\$PID_$2")"; show "$1" >&2; fail "$1's copy to $2 never backed up: $(ss -tnpH)"; }
}

export DDPRUN_RDZV_SECRET=cut-copy-secret
job=(--nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id="$id"
     --rdzv_conf=join_timeout=60,heartbeat_timeout=5,spares=2)
touch "$T/round"
for n in a b c; do nsnode "$(addr_of $n)" "$n" "${job[@]}" --event_log="$T/$n.events" "$T/node" "$n"; done
wait_for 120 started a b c
for n in d e; do  # d first: the next admitted
  nsnode "$(addr_of $n)" "$n" "${job[@]}" --event_log="$T/$n.events" "$T/node" "$n"
  wait_for 60 grep -q "this node is a hot spare" "$T/$n.err"
done

# --- 1. the receiver lost mid-copy ---------------------------------------------------------------
touch "$T/write.a.1" "$T/commit.a.1"
for n in b c; do poll_until 120 holds "$n" "$v1" || { show a b c >&2; fail "$n never held version 1"; }; done
x=$(next_of a a b c)
y=$( [[ $x == b ]] && echo c || echo b)
commit_stopped a "$x" 2
touch "$T/round"
kill -KILL "$(eval echo "\$PID_$x")"
finish "$x"
cut="^ddprun: snapshots: the copy of big \(96.0 MiB\) to the next node of the ring, $(addr_of "$x"):[0-9]+, was cut: send: (Connection reset by peer|Broken pipe); sent again once a next node takes it \(the next round's, if that node was lost\)$"
poll_until 60 grep -Eq "$cut" "$T/a.err" || { show a >&2; fail "a did not say its copy to $x was cut"; }
wait_for 120 started a "$y" d
for n in a "$y" d; do expect_eq "$(read_sum "$n")" "$v2" "the checksum of big that $n's worker read at its start after $x's loss"; done
expect_eq "$(grep -c 'snapshots: the copy of' "$T/a.err")" 1 "lines a said for its cut copy"
ok "the receiver ($x) SIGKILLed mid-copy: a said so in one line; the spare started with the new version, as every survivor"

# --- 2. the sender lost mid-copy -----------------------------------------------------------------
s=$(next_of a a "$y" d)  # never a, which hosts the rendezvous
r=$(next_of "$s" a "$y" d)
commit_stopped "$s" "$r" 3
touch "$T/round"
kill -KILL "$(eval echo "\$PID_$s")"
finish "$s"
kill -CONT "$(eval echo "\$PID_$r")"
survivors=(a e)
for n in "$y" d; do [[ $n == "$s" ]] || survivors+=("$n"); done
wait_for 120 started "${survivors[@]}"
for n in "${survivors[@]}"; do expect_eq "$(read_sum "$n")" "$v2" "the checksum of big that $n's worker read after $s's loss"; done
lost="^ddprun: snapshots: big as written on [0-9a-f]{16}-[0-9a-f]{8} is lost: its copy was cut when that node went, and no node holds it whole; the folder keeps the version written on [0-9a-f]{16}-[0-9a-f]{8}$"
expect_in "$T/$r.err" "$lost"
expect_eq "$(grep -c 'is lost: ' "$T/$r.err")" 1 "lines $r said for the lost copy"
expect_eq "$(on_node "$r" ls -A "$dir/.ddprun-incoming")" "" "$r's incoming folder"
ok "the sender ($s) SIGKILLed mid-copy: $r named the cut copy lost in one line; every node kept the previous whole version"

touch "$T/finish"
for n in "${survivors[@]}"; do finish_within 120 "$n"; expect_eq "$(eval echo "\$RC_$n")" 0 "node $n's exit ($(show "$n"))"; done
wait_for 30 no_leftovers
