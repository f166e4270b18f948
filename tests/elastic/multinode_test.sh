#!/usr/bin/env bash
# Several ddprun processes as separate nodes on distinct loopback addresses (127.0.0.2, .3, .4).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

worker dump <<'SH'
#!/bin/sh
echo "$RANK $LOCAL_RANK $GROUP_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_RUN_ID" > "$T/env.$RANK"
SH


# 1. Two nodes, static backend, --node_rank honoured: node 1 is started first and still gets ranks 2-3.
next_port
static=(--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.2 --master_port=$port)
node 127.0.0.3 b "${static[@]}" --node_rank=1 "$T/dump"
node 127.0.0.2 a "${static[@]}" --node_rank=0 "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "static pair"
mport=$(awk '{print $8}' "$T/env.0")
for r in 0 1 2 3; do
  expect_eq "$(cat "$T/env.$r")" "$r $((r % 2)) $((r / 2)) 4 2 2 127.0.0.2 $mport 0 static-127.0.0.2-$port" "rank $r"
done
ok "2 nodes, static: ranks by --node_rank, MASTER_ADDR on node 0, one MASTER_PORT"

# 1b. Static with --rdzv_endpoint: it replaces --master_addr/--master_port (here a TEST-NET
# address that nothing answers), as in torchrun. ddprun's rendezvous server takes the endpoint's
# port on node 0, so the workers get another port held free there, not the endpoint's.
next_port; rm -f "$T"/env.*
static=(--nnodes=2 --nproc_per_node=2 --rdzv_endpoint=127.0.0.2:$port --master_addr=192.0.2.1 --master_port=9
        --rdzv_conf=join_timeout=20)
node 127.0.0.3 b "${static[@]}" --node_rank=1 "$T/dump"
node 127.0.0.2 a "${static[@]}" --node_rank=0 "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "static pair meeting at --rdzv_endpoint ($(cat "$T/a.err" "$T/b.err"))"
mport=$(awk '{print $8}' "$T/env.0")
[[ "$mport" != "$port" ]] || fail "MASTER_PORT is the rendezvous server's port $port"
for r in 0 1 2 3; do
  expect_eq "$(cat "$T/env.$r")" "$r $((r % 2)) $((r / 2)) 4 2 2 127.0.0.2 $mport 0 static-127.0.0.2-$port" "rank $r"
done
ok "2 nodes, static, --rdzv_endpoint: met there, MASTER_ADDR on node 0, MASTER_PORT another held port"

# 2. Three nodes, c10d, different --nproc_per_node, no node ranks: contiguous ranks per node.
next_port; rm -f "$T"/env.*
c10d=(--nnodes=3 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=three)
node 127.0.0.2 a "${c10d[@]}" --nproc_per_node=1 "$T/dump"
node 127.0.0.3 b "${c10d[@]}" --nproc_per_node=2 "$T/dump"
node 127.0.0.4 c "${c10d[@]}" --nproc_per_node=3 "$T/dump"
finish a; finish b; finish c
expect_eq "$RC_a $RC_b $RC_c" "0 0 0" "three nodes"
expect_eq "$(ls "$T"/env.* | wc -l)" 6 "workers in a world of 1+2+3"
for r in 0 1 2 3 4 5; do
  read -r rank local group world lws gws addr mp rc id < "$T/env.$r"
  expect_eq "$world $gws $id" "6 3 three" "rank $r world"
  # Each node's ranks are contiguous: rank - local_rank is the same for all of the node's workers.
  echo "$group $((rank - local)) $lws" >> "$T/bases"
done
expect_eq "$(sort -u "$T/bases" | wc -l)" 3 "one base rank per node"
ok "3 nodes, c10d, nproc 1/2/3: world 6, contiguous ranks per node"

# 3. A worker crash on node 1 restarts every node; the restart count is the same everywhere.
next_port; rm -f "$T"/env.*
worker flaky <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/attempt.$RANK"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  [ "$GROUP_RANK" = 1 ] && [ "$LOCAL_RANK" = 0 ] && { sleep 0.3; exit 3; }
  exec sleep 60
fi
exit 0
SH
c10d=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=crash --max_restarts=2)
node 127.0.0.2 a "${c10d[@]}" "$T/flaky"
node 127.0.0.3 b "${c10d[@]}" "$T/flaky"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "crash then restart"
for r in 0 1 2 3; do expect_eq "$(tr '\n' ' ' < "$T/attempt.$r")" "0 1 " "attempts of rank $r"; done
expect_in "$T/a.err" "stopping workers: worker rank 2 .* failed with exit code 3"
ok "crash on node 1 restarts both nodes, restart count 1 on each"

# 4. Restarts exhausted: every node exits with the root cause's code and the same summary,
# with the traceback from the root cause's error file (it crossed the wire to the other node).
next_port
worker always <<'SH'
#!/bin/sh
if [ "$RANK" = 3 ]; then
  sleep 0.2
  printf '{"message": {"message": "OSError: disk full", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File \\"save.py\\", line 9, in save\\nOSError: disk full\\n", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE"
  exit 5
fi
exec sleep 60
SH
c10d=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=fail --max_restarts=1)
node 127.0.0.2 a "${c10d[@]}" "$T/always"
node 127.0.0.3 b "${c10d[@]}" "$T/always"
finish a; finish b
expect_eq "$RC_a $RC_b" "5 5" "exit codes after the budget"
for n in a b; do
  expect_in "$T/$n.err" "root cause: rank 3 \(local rank 1\) on $(hostname), pid [0-9]+: exit code 5"
  expect_in "$T/$n.err" "^    error: OSError: disk full$"
  expect_in "$T/$n.err" "^        File \"save.py\", line 9, in save$"
done
expect_in "$T/a.err" "failed \(exit code 5\) after 1 restart$"
ok "job-wide restart budget; same root cause on every node"

# 5. kill -9 of a node's launcher: the survivors re-rendezvous without it (MIN allows) and finish.
next_port; rm -f "$T"/env.*
worker until_two <<'SH'
#!/bin/sh
echo "$GROUP_WORLD_SIZE" >> "$T/gws.$GROUP_RANK.$$"
[ "$GROUP_WORLD_SIZE" = 3 ] && exec sleep 60
exit 0
SH
c10d=(--nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=lose
      --rdzv_conf=last_call_timeout=5,heartbeat_timeout=3)
node 127.0.0.2 a "${c10d[@]}" "$T/until_two"
node 127.0.0.3 b "${c10d[@]}" "$T/until_two"
node 127.0.0.4 c "${c10d[@]}" "$T/until_two"
three_running() { [[ $(cat "$T"/gws.* 2>/dev/null | grep -c '^3$') == 3 ]]; }
wait_for 30 three_running
kill -KILL "$PID_c"; finish c
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "survivors"
expect_in "$T/a.err" "was lost"
expect_eq "$(cat "$T"/gws.* | grep -c '^2$')" 2 "a round of the 2 survivors"
wait_for 10 no_leftovers
ok "node killed: survivors re-rendezvous as 2 nodes and finish; nothing left behind"

# 6. A late joiner is admitted at the next round.
next_port; rm -f "$T"/gws.*
c10d=(--nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=late
      --rdzv_conf=last_call_timeout=0.2)
worker wait_peer <<'SH'
#!/bin/sh
echo "$GROUP_WORLD_SIZE" >> "$T/gws.$GROUP_RANK.$$"
[ "$GROUP_WORLD_SIZE" = 2 ] && exit 0
exec sleep 60
SH
node 127.0.0.2 a "${c10d[@]}" "$T/wait_peer"
alone() { grep -qs '^1$' "$T"/gws.*; }
wait_for 30 alone
node 127.0.0.3 b "${c10d[@]}" "$T/wait_peer"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "late joiner"
expect_eq "$(cat "$T"/gws.* | grep -c '^2$')" 2 "the next round has both nodes"
ok "late joiner admitted at the next round"

# 7. Join timeout: the message says what was expected, what was seen and which flag to change.
next_port
set +e
"$DDPRUN" --nnodes=2 --node_rank=0 --master_addr=127.0.0.2 --master_port=$port --local_addr=127.0.0.2 \
  --rdzv_conf=join_timeout=1 "$T/dump" >"$T/timeout.out" 2>"$T/timeout.err"
rc=$?
set -e
expect_eq "$rc" 69 "join timeout exit code"
expect_in "$T/timeout.err" "2 nodes"
expect_in "$T/timeout.err" "join_timeout"
ok "join timeout: $(grep -v "rendezvous is open" "$T/timeout.err" | grep -m1 ddprun)"

# 8. A launcher of another job on the same endpoint is refused.
next_port
c10d=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port)
node 127.0.0.2 a "${c10d[@]}" --rdzv_id=right --rdzv_conf=join_timeout=20 "$T/dump"
wait_for 30 bash -c "exec 3<>/dev/tcp/127.0.0.2/$port" 2>/dev/null
set +e
"$DDPRUN" "${c10d[@]}" --local_addr=127.0.0.3 --rdzv_id=wrong "$T/dump" >"$T/wrong.out" 2>"$T/wrong.err"
rc=$?
set -e
expect_eq "$rc" 69 "wrong run id exit code"
expect_in "$T/wrong.err" "right"
expect_in "$T/wrong.err" "wrong"
kill -TERM "$PID_a"; finish a
ok "mismatched run id refused: $(grep -v "rendezvous is open" "$T/wrong.err" | grep -m1 ddprun)"

# 9. The workers' store is served by the ddprun of rank 0's node, and moves with rank 0: node b
# has rank 0; once it is killed, rank 0 of the survivors' round is on node a, which serves its
# own MASTER_PORT from then on. Each worker asks the store at MASTER_ADDR:MASTER_PORT for a
# torch 2.x PING.
next_port
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
c10d=(--nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=move
      --rdzv_conf=last_call_timeout=5,heartbeat_timeout=3)
node 127.0.0.2 a "${c10d[@]}" "$T/ping_store"
node 127.0.0.3 b "${c10d[@]}" --node_rank=0 "$T/ping_store"
node 127.0.0.4 c "${c10d[@]}" "$T/ping_store"
three_pinged() { [[ $(cat "$T"/ping.* 2>/dev/null | grep -c '^3 ') == 3 ]]; }
wait_for 30 three_pinged
expect_eq "$(cat "$T"/ping.* | sort -u)" "3 127.0.0.3" "round 1: every worker reached node b's store"
kill -KILL "$PID_b"; finish b
finish a; finish c
expect_eq "$RC_a $RC_c" "0 0" "survivors after rank 0's node was killed"
expect_eq "$(cat "$T"/ping.* | grep '^2 ' | sort | uniq -c | tr -s ' ')" " 2 2 127.0.0.2" "round 2: both reached node a's store"
ok "the store moves with rank 0: node b's, then, b killed, node a's"

# 10. Node 0's worker succeeds (and is reaped by its ddprun) before node 1's worker fails: the
# round is stopped on node 0 too (its ddprun reports it, closing the round's store to new
# connections), and both nodes restart; the next round's store answers.
next_port; rm -f "$T"/ping.*
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
c10d=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=late_fail --max_restarts=1)
node 127.0.0.2 a "${c10d[@]}" "$T/succeed_then_fail"
node 127.0.0.3 b "${c10d[@]}" "$T/succeed_then_fail"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "a failure after node 0 succeeded, then a restart ($(cat "$T/a.err" "$T/b.err"))"
expect_eq "$(cat "$T"/ping.* | sort | uniq -c | tr -s ' ')" " 4 2 127.0.0.2" "both workers of both rounds reached node 0's store"
expect_in "$T/a.err" "restarting workers \(restart 1 of 1\)"
ok "a failure after node 0's workers succeeded restarts both nodes; the store serves the next round"

# 11. The host goes away while a node waits for the first round: the node connects again (as
# before its first connection) and joins the host started in its place. Before, it ended at once
# with "lost the rendezvous"; a host that closes waiting connections to make room under a flood
# of connections did the same to real nodes.
next_port; rm -f "$T"/env.*
c10d=(--nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=rehost
      --rdzv_conf=join_timeout=60)
node 127.0.0.2 a "${c10d[@]}" "$T/dump"
node 127.0.0.3 b "${c10d[@]}" "$T/dump"
established() { [[ -n $(ss -Htn state established "dport = :$port" src 127.0.0.3) ]]; }
wait_for 30 established
kill -KILL "$PID_a"
finish a
wait_for 30 grep -q "before this node joined; connecting again" "$T/b.err"
node 127.0.0.2 a2 "${c10d[@]}" "$T/dump"
node 127.0.0.4 c "${c10d[@]}" "$T/dump"
finish a2; finish b; finish c
expect_eq "$RC_a2 $RC_b $RC_c" "0 0 0" "the job with a new host ($(cat "$T/b.err"))"
expect_eq "$(cat "$T"/env.* | awk '{print $4}' | sort | uniq -c | tr -s ' ')" " 3 3" "three ranks of a world of 3"
ok "a node waiting for its first round outlives its host and joins the next one"
wait_for 10 no_leftovers
