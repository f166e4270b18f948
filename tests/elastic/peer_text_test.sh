#!/usr/bin/env bash
# A peer's text on node 0's console: an insider (rdzv_peer.py, a node with the job's secret)
# reports a failure of its own worker whose kind, cause, message, traceback and host hold escape
# sequences, carriage returns and newlines followed by lines that read as ddprun's own. Node 0
# shows the failure, but none of those characters and none of those lines; a kind outside the
# vocabulary is refused as a bad field.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
peer=(python3 "$DDPRUN_SOURCE_DIR/tests/elastic/rdzv_peer.py")
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
export DDPRUN_RDZV_SECRET=the-jobs-secret

worker wait <<'SH'
#!/bin/sh
while [ ! -e "$T/release" ]; do sleep 0.05; done
SH

# printable FILE: fails when FILE holds a control character other than a newline (C0, DEL,
# C1's two UTF-8 bytes) or a line that begins as a forged one.
printable() {
  python3 - "$1" <<'PY' || { echo "--- $1:" >&2; cat -v "$1" >&2; fail "a peer's control characters or forged lines in $1"; }
import re, sys
text = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
forged = [line for line in text.split("\n") if line.startswith("ddprun: forged")]
sys.exit(1 if bad or forged else 0)
PY
}

# 1. A kind of the vocabulary, the rest full of escapes: the job ends with the insider's failure
# (no restarts), and node 0's console says so, printable.
next_port
job=(--nnodes=2 --nproc_per_node=1 --max_restarts=0 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
     --rdzv_id=insider)
node 127.0.0.2 a "${job[@]}" "$T/wait"
"${peer[@]}" insider 127.0.0.2 $port --secret=the-jobs-secret --run-id=insider --nnodes=2 > "$T/insider.out" 2>&1
touch "$T/release"
finish a
expect_eq "$RC_a" 7 "node 0's exit code after the insider's failure ($(show a))"
expect_in "$T/insider.out" "reporting its own worker's failure"
expect_in "$T/a.err" "stopping workers: worker rank 1 \(local rank 0\) on h\?\[2J\?ddprun: forged host line failed with exit code 7: msg \?\[1mbold\?\?\[2K$"
expect_in "$T/a.err" "root cause: rank 1 .*exit_code \(\?\[31mred\?\[0m\?\?ddprun: forged cause line \?\]0;title\? \?2J\)"
expect_in "$T/a.err" "^      \?\[2J\?ddprun: forged traceback line$"
printable "$T/a.err"
printable "$T/a.out"
ok "a failure's cause, message, traceback and host from a peer reach node 0's console without control characters"

# 2. A kind outside the vocabulary (escapes, a newline, a forged line): the report is refused
# like any other bad field, the insider's connection closed as a lost node's, and the job runs
# on with the nodes it has (2:3).
next_port; rm -f "$T/release"
job=(--nnodes=2:3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=badkind
     --rdzv_conf=last_call_timeout=3)
node 127.0.0.2 a "${job[@]}" "$T/wait"
node 127.0.0.3 b "${job[@]}" "$T/wait"
"${peer[@]}" insider 127.0.0.2 $port --secret=the-jobs-secret --run-id=badkind --nnodes=2:3 --bad-kind \
  > "$T/insider.out" 2>&1
touch "$T/release"
finish a; finish b
expect_eq "$RC_a $RC_b" "0 0" "the job after a refused kind ($(show a b))"
expect_in "$T/insider.out" "closed by peer"
expect_in "$T/a.err" "was lost: it sent a bad 'worker_failed' message: a failure's kind '\?\[2Jexit_code\?ddprun: forged kin.*' is neither one of ddprun's nor a --failure_rules name"
expect_not_in "$T/a.err" "forged (cause|message|traceback|host) line"
printable "$T/a.err"
printable "$T/a.out"
ok "a failure whose kind is not in the vocabulary is refused, and its text never reaches a console"
