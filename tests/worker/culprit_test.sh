#!/usr/bin/env bash
# Naming the right rank of a hang (issue 26, item 4), with this build's PyTorch (TORCH_PYTHON),
# gloo, 2 ranks, and a script with no heartbeat code: rank 1 sleeps before an all_reduce that
# rank 0 waits in. Rank 0, the victim, beat when it entered the collective; rank 1 did not. From
# the progress records that ddprun's module keeps (which collective each rank entered, and
# whether it is inside it), ddprun names rank 1 and says what rank 0 waits in:
#  1. the issue's command line, --hang_timeout=10 (--hang_startup=60 rather than its 10: torch
#     2.11's import alone took longer on the loaded CI VM, and a rank that has not started yet
#     cannot be told from one that hangs; both ranks beat long before either limit), rank 1
#     asleep after 11 all_reduces: "rank 1 hung: rank 0 waits in all_reduce #N; rank 1 has not
#     entered it: last in all_reduce #N-1; no progress for ...", rank 1 the root cause, its stack
#     where it sleeps (py-spy, if installed);
#  2. --hang_timeout=10 alone, rank 1 asleep before its first all_reduce: found within the 10 s
#     of rank 0's wait (not after --hang_startup's 600 s), rank 1 named;
#  3. two nodes of 2 ranks: node 0 names rank 1; on node 1 ranks 2 and 3 both wait, so it says
#     the rank they wait for is elsewhere; both nodes give rank 1 as the root cause (its failure
#     is dated no later than the first wait began, before the waiting ranks of node 1); and so
#     when node 0's stacks come late, after node 1's report stopped its workers;
#  4. DDP: rank 1 stuck inside its backward pass, in a hook on its loss, before any gradient (so
#     before its all-reduce), while rank 0 waits in that backward's all-reduce. Both have entered
#     the same ddp_backward, so the records cannot tell them apart (stopped before its backward,
#     rank 1 is named: progress_test.sh, examples_test.sh): ddprun says both wait in it, points
#     to the stacks, and rank 1's shows where (py-spy, if installed).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
torch_workers

# sleeper.py OUT BEFORE: BEFORE all_reduces, then rank 1 sleeps in rank_one_sleeps() while rank 0
# writes OUT/waiting (the time) and enters the next all_reduce.
cat >"$T/sleeper.py" <<'PY'
import os, sys, time
import torch
import torch.distributed as dist

def rank_one_sleeps():
    time.sleep(3600)

out, before = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo")
for _ in range(before):
    dist.all_reduce(torch.ones(4))
if dist.get_rank() == 1:
    rank_one_sleeps()
with open(os.path.join(out, "waiting"), "w") as f:
    f.write(repr(time.time()))
dist.all_reduce(torch.ones(4))
PY

# 1. The issue's command line.
mkdir "$T/late"
run_ddprun late --nproc_per_node=2 --hang_timeout=10 --hang_startup=60 --event_log="$T/late.jsonl" \
  "$T/sleeper.py" "$T/late" 11
expect_eq "$RC" 124 "exit code ($(cat "$T/late.err"))"
expect_in "$T/late.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it: last in all_reduce #[0-9]+; no progress for [0-9.]+ s \(hang timeout 10\.0 s\); collecting the stacks of 2 workers$"
waited=$(sed -nE 's/.*rank 0 waits in all_reduce #([0-9]+);.*/\1/p' "$T/late.err" | head -1)
last=$(sed -nE 's/.*last in all_reduce #([0-9]+);.*/\1/p' "$T/late.err" | head -1)
expect_eq "$last" "$((waited - 1))" "the collective rank 1 was last in, against the one rank 0 waits in"
expect_not_in "$T/late.err" "ranks 0, 1 hung|rank 0 hung"
expect_in "$T/late.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
expect_in "$T/late.jsonl" '"event":"exit".*"exit_code":124.*"hung":true,"kind":"hang","rank":1'
expect_stacks "its stack in rank_one_sleeps" "$T/late.err" "^        rank_one_sleeps \(.*sleeper.py:[0-9]+\)"
wait_for 20 no_leftovers
ok "--hang_timeout=10 --hang_startup=60: rank 1 named (rank 0 waits in all_reduce #$waited, rank 1 last in #$last)$STACKS"

# 2. --hang_timeout alone: rank 1 never entered any collective, and never beat.
mkdir "$T/first"
run_ddprun first --nproc_per_node=2 --hang_timeout=10 --event_log="$T/first.jsonl" "$T/sleeper.py" "$T/first" 0
expect_eq "$RC" 124 "exit code ($(cat "$T/first.err"))"
expect_in "$T/first.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it: (no collective entered yet; no progress since it started [0-9.]+ s ago|last in [a-z_]+ #[0-9]+; no progress for [0-9.]+ s .*); collecting"
expect_in "$T/first.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"
delay=$(hang_delay "$T/first.jsonl" 1 "$T/first/waiting")
within 9.5 16 "$delay" || fail "rank 1 named ${delay} s after rank 0 began to wait (--hang_timeout=10)"
wait_for 20 no_leftovers
ok "--hang_timeout=10 alone: rank 1, which never beat, named ${delay} s after rank 0 began to wait"

# 3. Two nodes: only node 0 sees rank 1's record; both agree on the root cause.
mkdir "$T/nodes"
port=$(free_tcp_port)
common=(--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.2 --master_port=$port --hang_timeout=5)
"$DDPRUN" --local_addr=127.0.0.3 "${common[@]}" --node_rank=1 "$T/sleeper.py" "$T/nodes" 11 >"$T/b.out" 2>"$T/b.err" &
pid_b=$!
"$DDPRUN" --local_addr=127.0.0.2 "${common[@]}" --node_rank=0 "$T/sleeper.py" "$T/nodes" 11 >"$T/a.out" 2>"$T/a.err" &
pid_a=$!
rc_a=0; wait $pid_a || rc_a=$?
rc_b=0; wait $pid_b || rc_b=$?
expect_eq "$rc_a/$rc_b" 124/124 "exit codes of the two nodes"
expect_in "$T/a.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it: last in all_reduce #[0-9]+"
expect_in "$T/b.err" "^ddprun: ranks 2, 3 wait in all_reduce #[0-9]+; every rank on this node entered it"
for n in a b; do expect_in "$T/$n.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"; done
wait_for 20 no_leftovers
ok "two nodes: node 0 names rank 1, node 1 says its ranks wait for another node's, both give rank 1 as the root cause"

# 3b. The same, node 0's stacks slow to come (a py-spy that takes 4 s, then fails: faulthandler
# answers after it): node 1's report of its waiting ranks reaches the rendezvous first, and stops
# node 0's workers while node 0 still collects. Node 0 reports rank 1 before it says its workers
# stopped, so the root cause is still rank 1, the first in time (it was lost: node 0 dropped the
# failure it was collecting stacks for once told to stop, and both nodes named rank 3).
worker slow-py-spy <<'SH'
#!/bin/sh
sleep 4
echo "Error: took too long" >&2
exit 1
SH
mkdir "$T/slow"
port=$(free_tcp_port)
common=(--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.2 --master_port=$port --hang_timeout=5)
"$DDPRUN" --local_addr=127.0.0.3 "${common[@]}" --node_rank=1 "$T/sleeper.py" "$T/slow" 11 >"$T/slow_b.out" 2>"$T/slow_b.err" &
pid_b=$!
DDPRUN_PY_SPY=$T/slow-py-spy "$DDPRUN" --local_addr=127.0.0.2 "${common[@]}" --node_rank=0 "$T/sleeper.py" "$T/slow" 11 \
  >"$T/slow_a.out" 2>"$T/slow_a.err" &
pid_a=$!
rc_a=0; wait $pid_a || rc_a=$?
rc_b=0; wait $pid_b || rc_b=$?
expect_eq "$rc_a/$rc_b" 124/124 "exit codes of the two nodes, node 0's stacks slow"
expect_in "$T/slow_a.err" "^ddprun: rank 1 hung: rank 0 waits in all_reduce #[0-9]+; rank 1 has not entered it"
for n in a b; do expect_in "$T/slow_$n.err" "root cause: rank 1 \(local rank 1\) on .*: hung \(exit code 124\)"; done
wait_for 20 no_leftovers
ok "two nodes, node 0's stacks slow: node 1's waiting ranks reported first, rank 1 still the root cause on both"

# 4. DDP, rank 1 stuck inside its own backward pass, before its all-reduce.
cat >"$T/inside.py" <<'PY'
import time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

def stuck_in_backward(grad):
    time.sleep(3600)

dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    optimizer.zero_grad()
    loss = model(torch.ones(2, 4)).sum()
    if dist.get_rank() == 1 and step == 3:
        loss.register_hook(stuck_in_backward)
    loss.backward()
    optimizer.step()
PY
run_ddprun inside --nproc_per_node=2 --hang_timeout=5 --log_dir="$T/inside.logs" "$T/inside.py"
expect_eq "$RC" 124 "exit code ($(cat "$T/inside.err"))"
expect_in "$T/inside.err" "^ddprun: ranks? [01](, [01])? hung: no progress for [0-9.]+ s \(hang timeout 5\.0 s; last step 3\)"
expect_in "$T/inside.err" "^ddprun: ranks 0, 1 wait in ddp_backward #4; every rank on this node entered it \(the rank they wait for is on another node, or stuck in its own backward pass before its all-reduce: see the stacks\)$"
expect_stacks "rank 1's stack in stuck_in_backward" \
  "$(run_dir "$T/inside.logs")/attempt_0/rank_1/stacks.txt" "stuck_in_backward \(.*inside.py:[0-9]+\)"
wait_for 20 no_leftovers
ok "DDP, rank 1 stuck inside its 4th backward pass: both ranks wait in ddp_backward #4, said so$STACKS"
