#!/usr/bin/env bash
# ddprun's TCP rendezvous: several ddprun processes as separate nodes on distinct loopback
# addresses (127.0.0.2, .3, .4). The scenarios of every backend (scenarios.sh) with
# --rdzv_backend=c10d, node a (127.0.0.2) hosting the rendezvous at a fresh port each time; then
# the TCP rendezvous's own: the static backend, a mismatched run id, a host that goes away, a
# node over the host's connection cap, a host that stops answering.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
source "$DDPRUN_TESTS_DIR/elastic/scenarios.sh"

BACKEND=c10d
backend_job() { next_port; RDZV=(--rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id="$1"); }
listening() { [[ -n $(ss -Hltn "sport = :$port" src 127.0.0.2) ]]; }
backend_first_joined() { wait_for 30 listening; }
backend_check_end() { :; }
# The host is node a: the node of rank 0 that can be lost is b, given --node_rank=0.
run_scenarios b

# 1. Two nodes, static backend, --node_rank honoured: node 1 is started first and still gets ranks 2-3.
next_port; rm -f "$T"/env.*
static=(--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.2 --master_port=$port)
node 127.0.0.3 b "${static[@]}" --node_rank=1 "$T/dump"
node 127.0.0.2 a "${static[@]}" --node_rank=0 "$T/dump"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "static pair"
mport=$(awk '{print $8}' "$T/env.0")
for r in 0 1 2 3; do
  expect_eq "$(cat "$T/env.$r")" "$r $((r % 2)) $((r / 2)) 4 2 2 127.0.0.2 $mport 0 static-127.0.0.2-$port" "rank $r"
done
ok "[static] 2 nodes: ranks by --node_rank, MASTER_ADDR on node 0, one MASTER_PORT"

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
ok "[static] 2 nodes, --rdzv_endpoint: met there, MASTER_ADDR on node 0, MASTER_PORT another held port"

# 2. Join timeout: the message says what was expected, what was seen and which flag to change.
next_port
set +e
"$DDPRUN" --nnodes=2 --node_rank=0 --master_addr=127.0.0.2 --master_port=$port --local_addr=127.0.0.2 \
  --rdzv_conf=join_timeout=1 "$T/dump" >"$T/timeout.out" 2>"$T/timeout.err"
rc=$?
set -e
expect_eq "$rc" 69 "join timeout exit code"
expect_in "$T/timeout.err" "2 nodes"
expect_in "$T/timeout.err" "join_timeout"
ok "[static] join timeout: $(grep -v "rendezvous is open" "$T/timeout.err" | grep -m1 ddprun)"

# 3. A launcher of another job on the same endpoint is refused.
next_port
c10d=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port)
node 127.0.0.2 a "${c10d[@]}" --rdzv_id=right --rdzv_conf=join_timeout=20 "$T/dump"
wait_for 30 listening
set +e
"$DDPRUN" "${c10d[@]}" --local_addr=127.0.0.3 --rdzv_id=wrong "$T/dump" >"$T/wrong.out" 2>"$T/wrong.err"
rc=$?
set -e
expect_eq "$rc" 69 "wrong run id exit code"
expect_in "$T/wrong.err" "right"
expect_in "$T/wrong.err" "wrong"
kill -TERM "$PID_a"; finish a
ok "[c10d] mismatched run id refused: $(grep -v "rendezvous is open" "$T/wrong.err" | grep -m1 ddprun)"

# 3b. Seconds with a fraction (the restart options and heartbeats travel in each node's join, the
# backoff in each assignment: all doubles) make a job; other heartbeat settings on one node are
# refused, naming them.
next_port
fractions=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=fractions
           --max_restarts=1 --restart_window=0.5 --restart_backoff_max=0.25)
node 127.0.0.2 a "${fractions[@]}" --rdzv_conf=join_timeout=20,heartbeat_interval=0.25,heartbeat_timeout=2.5 "$T/dump"
wait_for 30 listening
set +e
"$DDPRUN" "${fractions[@]}" --local_addr=127.0.0.4 --rdzv_conf=heartbeat_interval=0.25,heartbeat_timeout=1.5 \
  "$T/dump" >"$T/hb.out" 2>"$T/hb.err"
rc=$?
set -e
expect_eq "$rc" 69 "other heartbeat settings: exit code ($(cat "$T/hb.err"))"
expect_in "$T/hb.err" "heartbeat_interval=0.25,heartbeat_timeout=1.5 but rendezvous 'fractions' has heartbeat_interval=0.25,heartbeat_timeout=2.5"
node 127.0.0.3 b "${fractions[@]}" --rdzv_conf=join_timeout=20,heartbeat_interval=0.25,heartbeat_timeout=2.5 "$T/dump"
finish_within 30 a; finish_within 30 b
expect_eq "$RC_a:$RC_b" "0:0" "a job with fractional seconds ($(show a b))"
ok "[c10d] fractional --restart_window, --restart_backoff_max and heartbeats make a job; other heartbeat settings are refused"

# 4. The host goes away while a node waits for the first round: the node connects again (as
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
ok "[c10d] a node waiting for its first round outlives its host and joins the next one"
# 5. A node over the host's connection cap: max_connections=2 holds the host's own connection
# and node b's; node c is refused once, with a message naming max_connections and ulimit -n,
# and exits 69 instead of connecting again in a loop; the host says it once; a and b run on.
# The host is started at a soft ulimit -n of 100: ddprun raises it to the hard limit, and its
# workers get 100 back.
next_port; rm -f "$T"/env.* "$T/release"
worker limits <<'SH'
#!/bin/sh
ulimit -Sn > "$T/soft.$RANK"
while [ ! -e "$T/release" ]; do sleep 0.05; done
SH
capped=(--nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=capped
        --rdzv_conf=last_call_timeout=0.5,max_connections=2)
hard=$(ulimit -Hn)
( ulimit -Sn 100; exec "$DDPRUN" --local_addr=127.0.0.2 "${capped[@]}" "$T/limits" >"$T/a.out" 2>"$T/a.err" ) &
PID_a=$!
node 127.0.0.3 b "${capped[@]}" "$T/limits"
wait_for 60 test -e "$T/soft.1"
run_ddprun c --local_addr=127.0.0.4 "${capped[@]}" "$T/limits"
touch "$T/release"
finish a; finish b
expect_eq "$RC $RC_a $RC_b" "69 0 0" "exit codes of the refused node and the two that ran ($(show a b c))"
refusal="the rendezvous host has 2 connections, its limit max_connections=2 \(by default 2 per node plus 16, at most a quarter of the host's ulimit -n, $hard\)"
expect_in "$T/c.err" "$refusal; raise the host's ulimit -n"
expect_eq "$(grep -cE "refused a node: $refusal" "$T/a.err")" 1 "the host's lines about the cap ($(show a))"
expect_not_in "$T/c.err" "connecting again"
expect_eq "$(cat "$T/soft.0")" 100 "the soft ulimit -n of the host's worker (ddprun's own is raised)"
ok "[c10d] a node over max_connections is refused once, naming max_connections and ulimit -n, and exits 69"

# 6. The host stops (SIGSTOP: its connections stay open and say nothing). It sends a heartbeat
# only in answer to a node's, so a node hears none, and before the host could count it lost
# (heartbeat_timeout after the last heartbeat it acknowledged) it kills its workers (the fence,
# elastic/src/core/fence.hpp) and exits 69 naming the silence.
next_port; rm -f "$T"/soft.* "$T/release"
stalled=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=stalledhost
         --rdzv_conf=heartbeat_timeout=2)
node 127.0.0.2 a "${stalled[@]}" "$T/limits"
node 127.0.0.3 b "${stalled[@]}" "$T/limits"
wait_for 60 test -e "$T/soft.0" -a -e "$T/soft.1"
kill -STOP "$PID_a"
stopped_at=$SECONDS
finish_within 30 b
(( SECONDS - stopped_at <= 2 + 10 )) || fail "node b noticed its stopped host after $((SECONDS - stopped_at)) s (heartbeat_timeout 2 s)"
expect_eq "$RC_b" 69 "the node of a stopped host ($(show b))"
expect_in "$T/b.err" "lost the rendezvous at 127.0.0.2:$port: it acknowledged nothing this node sent for"
expect_in "$T/b.err" "heartbeat_timeout=2\\); this node's workers were killed first \\(fenced\\)"
# Resumed, the host may find its own connection silent too and end by itself before the TERM.
kill -CONT "$PID_a"
kill -TERM "$PID_a" 2>/dev/null || true
finish a
touch "$T/release"
ok "[c10d] a stopped host is noticed by its node within heartbeat_timeout: exit 69, naming the silence"
wait_for 10 no_leftovers
