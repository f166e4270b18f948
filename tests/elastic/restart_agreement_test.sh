#!/usr/bin/env bash
# The restart policy across nodes: two ddprun nodes on loopback (c10d, node a hosting), and the
# decision made once, by the coordinator, is the same on both: a SyntaxError on node b ends the
# job on both nodes with the same "not restarting" line; a crash loop on node b backs off and
# stops on both with the same reasons in both event logs; a node with other restart options is
# refused, as one with another --max_restarts is.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

PY=/usr/bin/python3
job() { next_port; JOB=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id="$1"
                        --rdzv_conf=join_timeout=60); }

printf 'def f(:\n' > "$T/broken_syntax.py"
worker syntax <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/attempt.$RANK"
[ "$RANK" = 1 ] && exec /usr/bin/python3 "$T/broken_syntax.py"
exec sleep 60
SH
export T
job syntax
node 127.0.0.2 a "${JOB[@]}" --node_rank=0 --max_restarts=100 --event_log="$T/a.jsonl" --result_file="$T/a.json" "$T/syntax"
node 127.0.0.3 b "${JOB[@]}" --node_rank=1 --max_restarts=100 --event_log="$T/b.jsonl" --result_file="$T/b.json" "$T/syntax"
finish_within 60 a; finish_within 60 b
expect_eq "$RC_a $RC_b" "1 1" "exit codes ($(show a b))"
for n in a b; do
  expect_in "$T/$n.err" "^ddprun: not restarting: rank 1 on .*: syntax_error \(SyntaxError: invalid syntax\): running the same code again cannot fix a syntax_error"
  expect_in "$T/$n.err" "root cause: rank 1 \(local rank 0\) on .*: exit code 1: syntax_error \(SyntaxError: invalid syntax\) at $T/broken_syntax.py:1"
  expect_eq "$($PY -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["kind"], r["retryable"], r["root_cause"]["rank"])' "$T/$n.json")" \
    "syntax_error False 1" "node $n's result file"
done
expect_eq "$(tr '\n' ' ' < "$T/attempt.1")" "0 " "one attempt of rank 1"
expect_eq "$(grep -c '"event":"worker_started"' "$T/a.jsonl")" 1 "one start of rank 0"
ok "a SyntaxError on node b: not restarted, the same line on both nodes"

rm -f "$T"/attempt.*
worker loop <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/attempt.$RANK"
[ "$RANK" = 1 ] && exit 1
exec sleep 60
SH
job loop
node 127.0.0.2 a "${JOB[@]}" --node_rank=0 --max_restarts=100 --crash_loop_limit=3 --event_log="$T/la.jsonl" "$T/loop"
# A node with other restart options is refused, naming them; the job goes on with one that agrees.
node 127.0.0.4 c "${JOB[@]}" --node_rank=1 --max_restarts=100 --crash_loop_limit=50 "$T/loop"
finish_within 60 c
expect_eq "$RC_c" 69 "a node with other restart options ($(show c))"
expect_in "$T/c.err" "this node has --restart_on=retryable --restart_window=0 --restart_backoff_max=60 --crash_loop_limit=50 but rendezvous 'loop' has .*--crash_loop_limit=3; give every node the same restart options"
node 127.0.0.3 b "${JOB[@]}" --node_rank=1 --max_restarts=100 --crash_loop_limit=3 --event_log="$T/lb.jsonl" "$T/loop"
finish_within 90 a; finish_within 90 b
expect_eq "$RC_a $RC_b" "1 1" "exit codes ($(show a b))"
for n in a b; do
  expect_in "$T/$n.err" "^ddprun: crash loop: 3 failures in a row with no progress since their start \(last: rank 1 on .*: exit_code\)"
done
expect_eq "$(events "$T/la.jsonl" restart backoff | tr '\n' ' ')" "1.0 2.0 None " "node a's backoffs"
expect_eq "$(events "$T/la.jsonl" restart reason)" "$(events "$T/lb.jsonl" restart reason)" "the same reasons on both nodes"
# Rank 0 may be stopped before its shell writes anything: its starts are in node a's event log.
expect_eq "$(tr '\n' ' ' < "$T/attempt.1")" "0 1 2 " "three attempts of rank 1"
expect_eq "$(grep -c '"event":"worker_started"' "$T/la.jsonl")" 3 "three starts of rank 0"
ok "a crash loop on node b: the same backoffs, reasons and stop on both nodes; a node with other restart options is refused"

no_leftovers || fail "processes left behind: $(leftovers)"
