# Sourced by the multi-node tests of every rendezvous backend (multinode_test.sh: the TCP
# rendezvous, c10d; etcd_test.sh: etcd), after lib.sh and nodes.sh: the scenarios that every
# backend must pass, written once. run_scenarios runs them all; a backend's own scenarios stay in
# its test. Nodes are ddprun processes on 127.0.0.2 (a), .3 (b), .4 (c) and .5 (d, a spare); every node has the
# same host name, so group ranks follow the addresses unless a --node_rank says otherwise.
#
# The test that sources this file defines its backend:
#   BACKEND                      its name in the ok lines
#   backend_job RUN_ID           sets RDZV to the flags that make a node meet the others of the
#                                job RUN_ID (a fresh endpoint where the backend needs one)
#   backend_first_joined         returns once node a, started alone, has joined (and, where the
#                                backend has one, leads the rendezvous)
#   backend_check_end SCENARIO RUN_ID
#                                the backend's own checks once a scenario's job has ended
#
# Every wait is for an event (a file a worker writes, a process that exits), bounded by a limit
# far above what it takes on a loaded machine; no scenario sleeps to let something happen.

worker dump <<'SH'
#!/bin/sh
echo "$RANK $LOCAL_RANK $GROUP_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_RUN_ID" > "$T/env.$RANK"
SH
# round_started: returns once every rank of this round ($WORLD_SIZE) has written its restart
# count to $T/attempt.RANK; fails after 60 s. A worker that fails on purpose waits for it, so that
# the failure meets a round whose workers all run.
worker round_started <<'SH'
#!/bin/sh
tries=0
while [ "$(cat "$T"/attempt.* 2>/dev/null | grep -cx "$TORCHELASTIC_RESTART_COUNT")" -lt "$WORLD_SIZE" ]; do
  tries=$((tries + 1))
  [ "$tries" -lt 1200 ] || exit 1
  sleep 0.05
done
SH
# ping_store: asks the workers' store at MASTER_ADDR:MASTER_PORT for a torch 2.x PING and
# records "GROUP_WORLD_SIZE MASTER_ADDR" in $T/ping.GROUP_RANK.PID; runs on in a round of 3.
worker ping_store <<'SH'
#!/bin/sh
/usr/bin/python3 -c '
import os, socket, struct
s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), timeout=20)
s.sendall(b"\0" + struct.pack("=I", 0x3C85F7CE) + b"\x0d" + struct.pack("=I", 9))
assert s.makefile("rb").read(4) == struct.pack("=I", 9)' || exit 1
echo "$GROUP_WORLD_SIZE $MASTER_ADDR" >> "$T/ping.$GROUP_RANK.$$"
[ "$GROUP_WORLD_SIZE" = 3 ] && exec sleep 60
exit 0
SH
# until_two: records "GROUP_WORLD_SIZE MASTER_ADDR" in $T/gws.GROUP_RANK.PID; runs on in a round
# of 3, ends at once in a smaller one.
worker until_two <<'SH'
#!/bin/sh
echo "$GROUP_WORLD_SIZE $MASTER_ADDR" >> "$T/gws.$GROUP_RANK.$$"
[ "$GROUP_WORLD_SIZE" = 3 ] && exec sleep 60
exit 0
SH
three_running() { [[ $(cat "$T"/gws.* 2>/dev/null | grep -c '^3 ') == 3 ]]; }
three_pinged() { [[ $(cat "$T"/ping.* 2>/dev/null | grep -c '^3 ') == 3 ]]; }
addr_of() { case $1 in a) echo 127.0.0.2 ;; b) echo 127.0.0.3 ;; c) echo 127.0.0.4 ;; esac; }
# A job's processes left (an etcd the test started is not one of them).
no_job_left() { [[ -z "$(leftovers | awk '$3 !~ /(^|\/)etcd$/')" ]]; }

# Two nodes of two workers, b started first: ranks by address, MASTER_ADDR on group rank 0, one
# MASTER_PORT, restart count 0, the run id as TORCHELASTIC_RUN_ID.
scenario_pair() {
  rm -f "$T"/env.*
  backend_job pair
  local job=(--nnodes=2 --nproc_per_node=2 "${RDZV[@]}" --rdzv_conf=join_timeout=60)
  node 127.0.0.3 b "${job[@]}" "$T/dump"
  node 127.0.0.2 a "${job[@]}" "$T/dump"
  finish_within 60 a; finish_within 60 b
  expect_eq "$RC_a $RC_b" "0 0" "[$BACKEND] pair ($(show a b))"
  local mport r
  mport=$(awk '{print $8}' "$T/env.0")
  for r in 0 1 2 3; do
    expect_eq "$(cat "$T/env.$r")" "$r $((r % 2)) $((r / 2)) 4 2 2 127.0.0.2 $mport 0 pair" "[$BACKEND] rank $r"
  done
  backend_check_end pair pair
  ok "[$BACKEND] 2 nodes: RANK/GROUP_RANK/WORLD_SIZE by address, MASTER_ADDR on group rank 0, one MASTER_PORT"
}

# Three nodes, nproc 1/2/3, no node ranks: a world of 6, each node's ranks contiguous.
scenario_three() {
  rm -f "$T"/env.* "$T/bases"
  backend_job three
  local job=(--nnodes=3 "${RDZV[@]}" --rdzv_conf=join_timeout=60)
  node 127.0.0.2 a "${job[@]}" --nproc_per_node=1 "$T/dump"
  node 127.0.0.3 b "${job[@]}" --nproc_per_node=2 "$T/dump"
  node 127.0.0.4 c "${job[@]}" --nproc_per_node=3 "$T/dump"
  finish_within 60 a; finish_within 60 b; finish_within 60 c
  expect_eq "$RC_a $RC_b $RC_c" "0 0 0" "[$BACKEND] three nodes ($(show a b c))"
  expect_eq "$(ls "$T"/env.* | wc -l)" 6 "[$BACKEND] workers in a world of 1+2+3"
  local r rank local group world lws gws addr mp rc id
  for r in 0 1 2 3 4 5; do
    read -r rank local group world lws gws addr mp rc id < "$T/env.$r"
    expect_eq "$world $gws $id $addr" "6 3 three 127.0.0.2" "[$BACKEND] rank $r"
    # By address: .2 has group rank 0 (rank 0), .3 group 1 (ranks 1-2), .4 group 2 (ranks 3-5).
    expect_eq "$group $((rank - local))" "$((rank == 0 ? 0 : rank < 3 ? 1 : 2)) $((rank == 0 ? 0 : rank < 3 ? 1 : 3))" \
      "[$BACKEND] rank $r base"
    echo "$group $((rank - local)) $lws" >> "$T/bases"
  done
  expect_eq "$(sort -u "$T/bases" | wc -l)" 3 "[$BACKEND] one base rank per node"
  backend_check_end three three
  ok "[$BACKEND] 3 nodes, nproc 1/2/3: world 6, contiguous ranks per node"
}

# A worker crash on node 1 restarts every node; the restart count is the same everywhere.
scenario_crash_restarts_all() {
  rm -f "$T"/attempt.*
  worker flaky <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/attempt.$RANK"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  [ "$GROUP_RANK" = 1 ] && [ "$LOCAL_RANK" = 0 ] && { "$T/round_started" || exit 9; exit 3; }
  exec sleep 60
fi
exit 0
SH
  backend_job crash
  local job=(--nnodes=2 --nproc_per_node=2 "${RDZV[@]}" --rdzv_conf=join_timeout=60 --max_restarts=2)
  node 127.0.0.2 a "${job[@]}" "$T/flaky"
  node 127.0.0.3 b "${job[@]}" "$T/flaky"
  finish_within 60 a; finish_within 60 b
  expect_eq "$RC_a $RC_b" "0 0" "[$BACKEND] crash then restart ($(show a b))"
  local r
  for r in 0 1 2 3; do expect_eq "$(tr '\n' ' ' < "$T/attempt.$r")" "0 1 " "[$BACKEND] attempts of rank $r"; done
  expect_in "$T/a.err" "stopping workers: worker rank 2 .* failed with exit code 3"
  backend_check_end crash_restarts_all crash
  ok "[$BACKEND] crash on node 1 restarts both nodes, restart count 1 on each"
}

# Restarts exhausted: every node restarts once (--max_restarts=1), then exits with the root
# cause's code and the same summary, with the traceback from the root cause's error file (it
# crossed the rendezvous to the other node).
scenario_budget_spent() {
  rm -f "$T"/attempt.*
  worker always <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/attempt.$RANK"
if [ "$RANK" = 3 ]; then
  "$T/round_started" || exit 9
  printf '{"message": {"message": "OSError: disk full", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File \\"save.py\\", line 9, in save\\nOSError: disk full\\n", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE"
  exit 5
fi
exec sleep 60
SH
  backend_job fail
  local job=(--nnodes=2 --nproc_per_node=2 "${RDZV[@]}" --rdzv_conf=join_timeout=60 --max_restarts=1)
  node 127.0.0.2 a "${job[@]}" "$T/always"
  node 127.0.0.3 b "${job[@]}" "$T/always"
  finish_within 60 a; finish_within 60 b
  expect_eq "$RC_a $RC_b" "5 5" "[$BACKEND] exit codes once the budget is spent ($(show a b))"
  local r n
  for r in 0 1 2 3; do expect_eq "$(tr '\n' ' ' < "$T/attempt.$r")" "0 1 " "[$BACKEND] attempts of rank $r"; done
  for n in a b; do
    expect_in "$T/$n.err" "root cause: rank 3 \(local rank 1\) on $(hostname), pid [0-9]+: exit code 5"
    expect_in "$T/$n.err" "^    error: OSError: disk full$"
    expect_in "$T/$n.err" "^        File \"save.py\", line 9, in save$"
  done
  expect_in "$T/a.err" "failed \(exit code 5\) after 1 restart$"
  backend_check_end budget_spent fail
  ok "[$BACKEND] job-wide restart budget: every node restarts once, then all exit 5 with the same root cause"
}

# three_nodes_running JOB...: nodes a (the first to join), b and c run until_two with JOB,
# until all three run their workers.
three_nodes_running() {
  node 127.0.0.2 a "$@" "$T/until_two"
  backend_first_joined
  node 127.0.0.3 b "$@" "$T/until_two"
  node 127.0.0.4 c "$@" "$T/until_two"
  wait_for 60 three_running
}

# kill -9 of a node that neither hosts nor leads the rendezvous nor has rank 0: the survivors
# re-rendezvous without it (MIN allows), MASTER_ADDR stays on node a, and they finish.
scenario_node_lost() {
  rm -f "$T"/gws.*
  backend_job lose
  local job=(--nnodes=2:3 --nproc_per_node=1 "${RDZV[@]}"
             --rdzv_conf=join_timeout=60,last_call_timeout=30,heartbeat_timeout=3)
  three_nodes_running "${job[@]}"
  expect_eq "$(cat "$T"/gws.* | grep -c '^3 127.0.0.2$')" 3 "[$BACKEND] MASTER_ADDR of the round of 3"
  kill -KILL "$PID_c"; finish c
  finish_within 60 a; finish_within 60 b
  expect_eq "$RC_a $RC_b" "0 0" "[$BACKEND] survivors ($(show a b))"
  expect_in "$T/a.err" "was lost"
  expect_eq "$(cat "$T"/gws.* | grep -c '^2 127.0.0.2$')" 2 \
    "[$BACKEND] a round of the 2 survivors, MASTER_ADDR on node a"
  wait_for 10 no_job_left
  backend_check_end node_lost lose
  ok "[$BACKEND] node killed: survivors re-rendezvous as 2 nodes and finish; nothing left behind"
}

# scenario_rank0_lost VICTIM: the node with group rank 0 is SIGKILLed while its workers run. The
# workers' store is served by the ddprun of rank 0's node and moves with rank 0: every worker of
# the round of 3 reaches VICTIM's store, every worker of the survivors' round the store of their
# new group rank 0 (the lowest address left). VICTIM is a (the first node to join, lowest
# address) or b (given --node_rank=0); each worker asks its store for a torch 2.x PING.
scenario_rank0_lost() {
  local victim=$1 hint=() survivors=() n
  [[ $victim == b ]] && hint=(--node_rank=0)
  for n in a b c; do [[ $n == "$victim" ]] || survivors+=("$n"); done
  rm -f "$T"/ping.*
  backend_job move
  local job=(--nnodes=2:3 --nproc_per_node=1 "${RDZV[@]}"
             --rdzv_conf=join_timeout=60,last_call_timeout=30,heartbeat_timeout=3)
  node 127.0.0.2 a "${job[@]}" "$T/ping_store"
  backend_first_joined
  node 127.0.0.3 b "${job[@]}" "${hint[@]}" "$T/ping_store"
  node 127.0.0.4 c "${job[@]}" "$T/ping_store"
  wait_for 60 three_pinged
  expect_eq "$(cat "$T"/ping.* | sort -u)" "3 $(addr_of "$victim")" \
    "[$BACKEND] round 1: every worker reached node $victim's store"
  kill -KILL "$(eval echo "\$PID_$victim")"; finish "$victim"
  for n in "${survivors[@]}"; do finish_within 60 "$n"; done
  expect_eq "$(eval echo "\$RC_${survivors[0]} \$RC_${survivors[1]}")" "0 0" \
    "[$BACKEND] survivors after rank 0's node $victim was killed ($(show "${survivors[@]}"))"
  expect_eq "$(cat "$T"/ping.* | grep '^2 ' | sort | uniq -c | tr -s ' ')" " 2 2 $(addr_of "${survivors[0]}")" \
    "[$BACKEND] round 2: both reached node ${survivors[0]}'s store"
  wait_for 10 no_job_left
  backend_check_end rank0_lost move
  ok "[$BACKEND] the store moves with rank 0: node $victim's, then, $victim killed, node ${survivors[0]}'s"
}

# A node whose launcher stops answering (SIGSTOP) is lost within heartbeat_timeout; the others go
# on without it. Once resumed, it finds itself out of the job and ends with a rendezvous error.
scenario_stalled_node() {
  rm -f "$T"/gws.*
  backend_job stall
  local job=(--nnodes=2:3 --nproc_per_node=1 "${RDZV[@]}"
             --rdzv_conf=join_timeout=60,last_call_timeout=30,heartbeat_timeout=2)
  three_nodes_running "${job[@]}"
  kill -STOP "$PID_c"
  local stopped_at=$SECONDS
  two_done() { [[ $(cat "$T"/gws.* 2>/dev/null | grep -c '^2 ') == 2 ]]; }
  wait_for 60 two_done
  (( SECONDS - stopped_at <= 2 + 10 )) ||
    fail "[$BACKEND] the stalled node was noticed after $((SECONDS - stopped_at)) s (heartbeat_timeout 2 s)"
  finish_within 60 a; finish_within 60 b
  kill -CONT "$PID_c"; finish_within 60 c
  expect_eq "$RC_a $RC_b $RC_c" "0 0 69" "[$BACKEND] survivors and the stalled node ($(show a b c))"
  wait_for 10 no_job_left
  backend_check_end stalled_node stall
  ok "[$BACKEND] stalled node (SIGSTOP): lost, the others finished as 2 nodes; it exits 69 once resumed"
}

# A late joiner is admitted at the next round.
scenario_late_joiner() {
  rm -f "$T"/gws.*
  worker wait_peer <<'SH'
#!/bin/sh
echo "$GROUP_WORLD_SIZE" >> "$T/gws.$GROUP_RANK.$$"
[ "$GROUP_WORLD_SIZE" = 2 ] && exit 0
exec sleep 60
SH
  backend_job late
  local job=(--nnodes=1:2 --nproc_per_node=1 "${RDZV[@]}" --rdzv_conf=join_timeout=60,last_call_timeout=0.2)
  node 127.0.0.2 a "${job[@]}" "$T/wait_peer"
  alone() { grep -qs '^1$' "$T"/gws.*; }
  wait_for 30 alone
  node 127.0.0.3 b "${job[@]}" "$T/wait_peer"
  finish_within 60 a; finish_within 60 b
  expect_eq "$RC_a $RC_b" "0 0" "[$BACKEND] late joiner ($(show a b))"
  expect_eq "$(cat "$T"/gws.* | grep -c '^2$')" 2 "[$BACKEND] the next round has both nodes"
  backend_check_end late_joiner late
  ok "[$BACKEND] late joiner admitted at the next round"
}

# Node 0's worker succeeds (and is reaped by its ddprun) before node 1's worker fails: the round
# is stopped on node 0 too (its ddprun reports it, closing the round's store to new
# connections), and both nodes restart; the next round's store answers.
scenario_success_then_failure() {
  rm -f "$T"/ping.* "$T/node0.fifo"
  mkfifo "$T/node0.fifo"
  worker succeed_then_fail <<'SH'
#!/bin/sh
"$T/ping_store" || exit 1
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
if [ "$GROUP_RANK" = 0 ]; then echo $$ > "$T/node0.fifo"; exit 0; fi
exec /usr/bin/python3 -c '
import os, select, sys, time
pid = int(open(sys.argv[1]).read())
try:
    select.select([os.pidfd_open(pid)], [], [], 30)  # until node 0 worker has exited
except ProcessLookupError:
    pass
deadline = time.monotonic() + 30
while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:  # until its ddprun reaped it
    time.sleep(0.01)
sys.exit(3)' "$T/node0.fifo"
SH
  backend_job late_fail
  local job=(--nnodes=2 --nproc_per_node=1 "${RDZV[@]}" --rdzv_conf=join_timeout=60 --max_restarts=1)
  node 127.0.0.2 a "${job[@]}" "$T/succeed_then_fail"
  node 127.0.0.3 b "${job[@]}" "$T/succeed_then_fail"
  finish_within 60 a; finish_within 60 b
  expect_eq "$RC_a $RC_b" "0 0" "[$BACKEND] a failure after node 0 succeeded, then a restart ($(show a b))"
  expect_eq "$(cat "$T"/ping.* | sort | uniq -c | tr -s ' ')" " 4 2 127.0.0.2" \
    "[$BACKEND] both workers of both rounds reached node 0's store"
  expect_in "$T/a.err" "restarting workers \(restart 1 of 1\)"
  backend_check_end success_then_failure late_fail
  ok "[$BACKEND] a failure after node 0's workers succeeded restarts both nodes; the store serves the next round"
}

# Join timeout: one node of two; the message says what was expected, what was seen and which
# flag to change.
scenario_join_timeout() {
  backend_job alone
  run_ddprun timeout --nnodes=2 --nproc_per_node=1 "${RDZV[@]}" --local_addr=127.0.0.2 \
    --rdzv_conf=join_timeout=1 "$T/dump"
  expect_eq "$RC" 69 "[$BACKEND] join timeout exit code ($(cat "$T/timeout.err"))"
  expect_in "$T/timeout.err" "2 nodes"
  expect_in "$T/timeout.err" "join_timeout"
  backend_check_end join_timeout alone
  ok "[$BACKEND] join timeout: $(grep -v "rendezvous is open" "$T/timeout.err" | grep -m1 ddprun)"
}

# Hot spares: a job of 3 nodes (a, b, c) keeping 1 spare (--rdzv_conf spares=1). Node d joins
# the running job: it starts no workers and says so in /status and its event log. c's ddprun is
# SIGKILLed: the next round runs a, b and d, world size 3 again; the job ends when d's workers
# have run (those of a and b wait for them).
scenario_spare_replaces_lost() {
  rm -f "$T"/spare.* "$T"/d.events
  worker spare_worker <<'SH'
#!/bin/sh
echo "$WORLD_SIZE $GROUP_WORLD_SIZE $TORCHELASTIC_RESTART_COUNT" >> "$T/spare.$1.$$"
[ "$1" = d ] && exit 0
tries=0
until ls "$T"/spare.d.* >/dev/null 2>&1; do
  tries=$((tries + 1))
  [ "$tries" -lt 1200 ] || exit 1
  sleep 0.05
done
SH
  backend_job spare
  local job=(--nnodes=3 --nproc_per_node=1 "${RDZV[@]}" --rdzv_conf=join_timeout=60,heartbeat_timeout=3,spares=1)
  three_spare_running() { [[ $(cat "$T"/spare.[abc].* 2>/dev/null | grep -c '^3 3 0$') == 3 ]]; }
  node 127.0.0.2 a "${job[@]}" "$T/spare_worker" a
  backend_first_joined
  node 127.0.0.3 b "${job[@]}" "$T/spare_worker" b
  node 127.0.0.4 c "${job[@]}" "$T/spare_worker" c
  wait_for 60 three_spare_running
  node 127.0.0.5 d "${job[@]}" --status_port=0 --event_log="$T/d.events" "$T/spare_worker" d
  local url
  url=$(status_url "$T/d.err")
  d_spare() { curl -sf "$url/status" | grep -q '"phase": "spare"'; }
  wait_for 60 d_spare
  curl -sf "$url/status" > "$T/d.status"
  expect_in "$T/d.status" '"spare": 1,'
  expect_in "$T/d.events" '"event":"spare".*"place":1'
  expect_in "$T/d.err" "this node is a hot spare: rendezvous 'spare' runs round 1 with its 3 nodes"
  [[ -z $(ls "$T"/spare.d.* 2>/dev/null) ]] || fail "[$BACKEND] the spare started workers while the job was full"
  kill -KILL "$PID_c"; finish c
  finish_within 60 a; finish_within 60 b; finish_within 60 d
  expect_eq "$RC_a $RC_b $RC_d" "0 0 0" "[$BACKEND] the job with its spare ($(show a b d))"
  expect_eq "$(cat "$T"/spare.d.*)" "3 3 0" "[$BACKEND] the spare's workers: world size 3, no restart used"
  expect_in "$T/a.err" "was lost"
  expect_in "$T/d.events" '"event":"round_started".*"world_size":3'
  wait_for 10 no_job_left
  backend_check_end spare_replaces_lost spare
  ok "[$BACKEND] 3 nodes + 1 spare: a node killed, the spare runs its workers in the next round at world size 3"
}

# file_made FILE: returns once FILE exists; fails after 60 s.
worker file_made <<'SH'
#!/bin/sh
tries=0
until [ -e "$1" ]; do
  tries=$((tries + 1))
  [ "$tries" -lt 1200 ] || exit 1
  sleep 0.05
done
SH
# suspect NODE: writes "WORLD_SIZE GROUP_WORLD_SIZE RESTART_COUNT" to $T/q.NODE.PID. Once every
# rank of the round runs and $T/q.go exists, node c's worker kills itself with SIGSEGV in the
# first two rounds (a hardware-like failure: segfault), while the others run until stopped; in
# the third (restart count 2) every worker waits for $T/q.release and exits 0.
worker suspect <<'SH'
#!/bin/sh
echo "$WORLD_SIZE $GROUP_WORLD_SIZE $TORCHELASTIC_RESTART_COUNT" >> "$T/q.$1.$$"
echo "$TORCHELASTIC_RESTART_COUNT" > "$T/attempt.$RANK"
"$T/round_started" || exit 1
if [ "$1" = c ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then
  "$T/file_made" "$T/q.go" || exit 1
  kill -SEGV $$
fi
[ "$TORCHELASTIC_RESTART_COUNT" -ge 2 ] || exec sleep 120
exec "$T/file_made" "$T/q.release"
SH
# literally TEXT: TEXT as an extended regular expression that matches only itself.
literally() { sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$1"; }
third_round_running() { [[ $(cat "$T"/q.* 2>/dev/null | grep -c '^3 3 2$') == 3 ]]; }

# Nodes a, b, c and spare d (--nnodes=3, spares=1): node c's worker segfaults in two rounds in a
# row, within quarantine_window: c is quarantined (its ddprun exits 71), the third round runs with
# the spare at full size, and every node's event log, the coordinator's /status (a: the TCP host,
# the etcd leader; it lists the spare before) and the summary name c.
scenario_quarantine() {
  rm -f "$T"/q.* "$T"/attempt.* "$T"/[abcd].events
  backend_job quarantine
  local job=(--nnodes=3 --nproc_per_node=1 --max_restarts=3 "${RDZV[@]}"
             --rdzv_conf=join_timeout=60,heartbeat_timeout=3,spares=1,quarantine_after=2,quarantine_window=600)
  local n
  node 127.0.0.2 a "${job[@]}" --status_port=0 --event_log="$T/a.events" "$T/suspect" a
  backend_first_joined
  local url
  url=$(status_url "$T/a.err")
  node 127.0.0.3 b "${job[@]}" --event_log="$T/b.events" "$T/suspect" b
  node 127.0.0.4 c "${job[@]}" --event_log="$T/c.events" "$T/suspect" c
  # d joins the full round: it waits as the spare; c fails only then.
  first_round_running() { [[ $(cat "$T"/q.[abc].* 2>/dev/null | grep -c '^3 3 0$') == 3 ]]; }
  wait_for 60 first_round_running
  node 127.0.0.5 d "${job[@]}" --event_log="$T/d.events" "$T/suspect" d
  spare_listed() { curl -sf "$url/status" | tr -d '\n ' | grep -q "\"spares\":\[\"$(hostname)(127.0.0.5)\"\]"; }
  wait_for 60 spare_listed
  touch "$T/q.go"
  wait_for 90 third_round_running
  curl -sf "$url/status" > "$T/a.status"
  touch "$T/q.release"
  for n in a b c d; do finish_within 60 "$n"; done
  expect_eq "$RC_a $RC_b $RC_c $RC_d" "0 0 71 0" "[$BACKEND] the quarantined node exits 71, the others 0 ($(show a b c d))"
  local victim="$(hostname) (127.0.0.4)"
  local why="its workers were the root cause of 2 hardware-like failures within 600 s (segfault, segfault)"
  expect_eq "$(cat "$T"/q.c.* | wc -l)" 2 "[$BACKEND] node c ran two rounds"
  expect_eq "$(cat "$T"/q.d.*)" "3 3 2" "[$BACKEND] the spare's workers: world size 3, in the third round"
  expect_in "$T/c.err" "$(literally "this node ($victim) is quarantined: $why; the job goes on without it; exit 71")"
  expect_in "$T/a.err" "$(literally "node $victim is quarantined: $why; the job goes on without it")"
  expect_in "$T/a.err" "$(literally "quarantined during the job: $victim: $why")"
  for n in a b c d; do expect_in "$T/$n.events" "\"event\":\"quarantined\".*\"node\":\"$(literally "$victim")\""; done
  expect_in "$T/a.status" "\"node\": \"$(literally "$victim")\""
  expect_in "$T/d.events" '"event":"round_started".*"world_size":3'
  wait_for 10 no_job_left
  backend_check_end quarantine quarantine
  ok "[$BACKEND] 3 nodes + 1 spare: a node whose worker segfaults twice is quarantined (exit 71); the spare runs the third round at world size 3"
}

# The same failures at --nnodes MIN without a spare: no quarantine, a normal restart that says
# the node is suspect; c runs the third round too.
scenario_suspect_at_min() {
  rm -f "$T"/q.* "$T"/attempt.*
  touch "$T/q.go"
  backend_job suspect
  local job=(--nnodes=3 --nproc_per_node=1 --max_restarts=3 "${RDZV[@]}" --rdzv_conf=join_timeout=60,heartbeat_timeout=3)
  local n
  node 127.0.0.2 a "${job[@]}" "$T/suspect" a
  backend_first_joined
  node 127.0.0.3 b "${job[@]}" "$T/suspect" b
  node 127.0.0.4 c "${job[@]}" "$T/suspect" c
  wait_for 90 third_round_running
  touch "$T/q.release"
  for n in a b c; do finish_within 60 "$n"; done
  expect_eq "$RC_a $RC_b $RC_c" "0 0 0" "[$BACKEND] at MIN without a spare ($(show a b c))"
  expect_eq "$(grep -c '^3 3 ' "$T"/q.c.* | awk -F: '{s += $2} END {print s}')" 3 "[$BACKEND] node c ran all three rounds"
  expect_in "$T/a.err" "$(literally "node $(hostname) (127.0.0.4) is suspect: its workers were the root cause of 2 hardware-like failures within 600 s (segfault, segfault); kept, since the job would have 2 nodes without it, fewer than --nnodes MIN 3, and no spare")"
  wait_for 10 no_job_left
  backend_check_end suspect_at_min suspect
  ok "[$BACKEND] at MIN without a spare: a node whose worker segfaults twice is kept; a normal restart"
}

# Every scenario above, in this order; VICTIM as scenario_rank0_lost's.
run_scenarios() {
  local victim=$1
  scenario_pair
  scenario_three
  scenario_crash_restarts_all
  scenario_budget_spent
  scenario_node_lost
  scenario_rank0_lost "$victim"
  scenario_stalled_node
  scenario_late_joiner
  scenario_success_then_failure
  scenario_join_timeout
  scenario_spare_replaces_lost
  scenario_quarantine
  scenario_suspect_at_min
}
