#!/usr/bin/env bash
# --chaos (issue 58, item 2): ddprun injects faults into its own job at seeded times, the job
# recovers and finishes, and the goodput ledger and the event log say which failures were
# injected; on one node (kill and hang) and on two (loopback, one TCP rendezvous); refused in
# one line: bad values before anything starts (exit 64), and a node whose --chaos differs from the
# rendezvous host's when it joins (exit 69, as every setting the nodes must share).
#
# The workers resume from their own step counter, committed to DDPRUN_SNAPSHOT_DIR at every step,
# so the job always ends: STEPS steps of 0.1 s each. The seeds are chosen so that the first fault
# is due before the job could end without one (1.3 s into a job of 4 s of steps): the checks hold
# whatever the machine's load delays.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

export STEPS=40
worker steps <<'SH'
#!/bin/bash
f="$DDPRUN_SNAPSHOT_DIR/ckpt.${NODE:-solo}.$LOCAL_RANK"
step=0
[ -f "$f" ] && step=$(cat "$f")
while [ "$step" -lt "$STEPS" ]; do
  sleep 0.1
  step=$((step + 1))
  echo "$step" > "$f.tmp" && mv "$f.tmp" "$f"
  touch "$DDPRUN_HEARTBEAT_FILE"
done
SH

# injected_match NAME: node NAME's result file counts as many injected failures as its event log
# has chaos_fault records, or fewer (a fault whose round a failure on another node stopped first
# is counted as that node's there), and every failure it counts as injected is its own.
injected() { json_field "$T/$1.json" '["goodput"]["failures_injected"]'; }
faults() { events "$T/$1.jsonl" chaos_fault kind | wc -l; }

# 1. Bad values: one line naming --chaos, exit 64, nothing started.
for bad in "mtbf=0" "mtbf=5,kinds=oom" "mtbf=5,rate=2"; do
  run_ddprun bad --max_restarts=3 --chaos="$bad" "$T/steps"
  expect_eq "$RC" 64 "--chaos=$bad: exit code"
  expect_in "$T/bad.err" "^ddprun: error: --chaos=$bad: .*; accepted: off, or mtbf=SECONDS"
  expect_eq "$(wc -l < "$T/bad.err")" 1 "--chaos=$bad: one line"
done
run_ddprun bad --chaos=mtbf=5 "$T/steps"
expect_eq "$RC" 64 "--chaos without --max_restarts"
expect_in "$T/bad.err" "^ddprun: error: --chaos=mtbf=5: .*--max_restarts=0 .* give --max_restarts=N"
run_ddprun bad --max_restarts=3 --chaos=mtbf=5,kinds=hang "$T/steps"
expect_eq "$RC" 64 "--chaos kinds=hang without --hang_timeout"
expect_in "$T/bad.err" "^ddprun: error: --chaos=mtbf=5,kinds=hang: kinds=hang .* give --hang_timeout"
run_ddprun bad --max_restarts=3 --chaos=mtbf=5,kinds=node "$T/steps"
expect_eq "$RC" 64 "--chaos kinds=node on one node"
PET_CHAOS=mtbf=0 run_ddprun bad --max_restarts=3 "$T/steps"
expect_eq "$RC" 64 "PET_CHAOS=mtbf=0"
expect_in "$T/bad.err" "^ddprun: error: PET_CHAOS=mtbf=0: mtbf=0 is not seconds more than 0"
ok "bad --chaos values and combinations: one line, exit 64"

# 2. One node, two workers, kills and hangs: the loud line, the faults, recovered, finished.
run_ddprun solo --nproc_per_node=2 --max_restarts=20 --hang_timeout=2 --chaos=mtbf=1.5,kinds=kill,hang,seed=2 \
  --result_file="$T/solo.json" --event_log="$T/solo.jsonl" "$T/steps"
expect_eq "$RC" 0 "one node: the job recovers and ends well ($(cat "$T/solo.err"))"
expect_in "$T/solo.err" "^ddprun: --chaos: REHEARSAL OF FAILURES: .* seed 2; .* replay with --chaos=mtbf=1.5,kinds=kill,hang,seed=2$"
expect_in "$T/solo.err" "^ddprun: --chaos: injected a kill fault at [0-9.]+ s: SIGKILL rank 1 \(local rank 1, pid [0-9]+\)"
expect_eq "$(events "$T/solo.jsonl" started chaos)" "mtbf=1.5,kinds=kill,hang,seed=2" "one node: the rehearsal in the started record"
n=$(faults solo)
(( n >= 1 )) || fail "one node: no chaos_fault record ($(cat "$T/solo.err"))"
expect_eq "$(injected solo)" "$n" "one node: the ledger's injected failures against the faults"
expect_eq "$(json_field "$T/solo.json" '["goodput"]["failures"][0]["injected"]')" True "one node: the first failure injected"
expect_in "$T/solo.err" "^ddprun: goodput (at most )?[0-9.]+%: started in [0-9.]+ s, $n failures? \(.*; $n injected by --chaos\) cost"
ok "one node: $n faults injected (kinds $(events "$T/solo.jsonl" chaos_fault kind | sort | uniq -c | xargs)), the job recovered and finished, the ledger says they were injected"

# 3. Two nodes of one worker: each injects its own faults (its own stream of the same seed).
rdzv=(--nnodes=2 --nproc_per_node=1 --max_restarts=20 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
      --rdzv_id="chaos3-$$" --chaos=mtbf=1.5,kinds=kill,seed=2)
NODE=a node 127.0.0.2 a "${rdzv[@]}" --result_file="$T/a.json" --event_log="$T/a.jsonl" "$T/steps"
NODE=b node 127.0.0.3 b "${rdzv[@]}" --result_file="$T/b.json" --event_log="$T/b.jsonl" "$T/steps"
finish_within 90 a
finish_within 30 b
expect_eq "$RC_a $RC_b" "0 0" "two nodes: the job recovers and ends well ($(show a b))"
na=$(faults a) nb=$(faults b)
(( na + nb >= 1 )) || fail "two nodes: no chaos_fault record ($(show a b))"
(( $(injected a) <= na && $(injected b) <= nb && $(injected a) + $(injected b) >= 1 )) ||
  fail "two nodes: injected failures a $(injected a) b $(injected b) against faults a $na b $nb"
ok "two nodes: $na + $nb faults injected, the job recovered and finished, each ledger counts its own"

# 3b. kinds=node on two nodes of an elastic job (--nnodes=1:2): b, group rank 1, kills its own
# ddprun and workers at its first fault (nothing of it left), and a, the rendezvous's host and group
# rank 0, injects kills instead, counts b lost and finishes alone. Then the same with
# --node_rank swapped: a hosts the rendezvous with group rank 1 and b has group rank 0, so neither
# may lose its ddprun (a's would end the job): both inject kills only, and the job ends well.
next_port
rm -f "$T"/[ab].jsonl  # an event log is appended to: the scenario's own records only
rdzv=(--nnodes=1:2 --nproc_per_node=1 --max_restarts=20 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
      --rdzv_id="chaos3b-$$" --rdzv_conf=heartbeat_timeout=3 --chaos=mtbf=1,kinds=node,seed=3)
NODE=a node 127.0.0.2 a "${rdzv[@]}" --node_rank=0 --event_log="$T/a.jsonl" "$T/steps"
wait_for 30 grep -q "REHEARSAL OF FAILURES" "$T/a.err"
NODE=b node 127.0.0.3 b "${rdzv[@]}" --node_rank=1 --event_log="$T/b.jsonl" "$T/steps"
finish_within 90 b
finish_within 90 a
expect_eq "$RC_a" 0 "kinds=node: the host ends well ($(show a b))"
expect_eq "$RC_b" 137 "kinds=node: b's ddprun killed itself ($(show b))"
expect_in "$T/b.err" "^ddprun: --chaos: injected a node fault at [0-9.]+ s: SIGKILL this ddprun and rank 1 \(local rank 0\)$"
expect_eq "$(events "$T/b.jsonl" chaos_fault kind | tail -1)" node "kinds=node: b's last fault record (written before the kill)"
expect_eq "$(events "$T/a.jsonl" chaos_fault kind | sort -u | xargs)" "$( (( $(faults a) )) && echo kill)" \
  "kinds=node: the host (group rank 0) injects kills only"
wait_for 10 no_leftovers
ok "kinds=node: b's ddprun and worker killed (after $(faults b) fault(s)), the host injected $(faults a) kills and finished alone"

next_port
rm -f "$T"/[ab].jsonl
rdzv=(--nnodes=2 --nproc_per_node=1 --max_restarts=20 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
      --rdzv_id="chaos3c-$$" --chaos=mtbf=1,kinds=node,seed=3)
NODE=a node 127.0.0.2 a "${rdzv[@]}" --node_rank=1 --event_log="$T/a.jsonl" "$T/steps"
NODE=b node 127.0.0.3 b "${rdzv[@]}" --node_rank=0 --event_log="$T/b.jsonl" "$T/steps"
finish_within 90 a
finish_within 30 b
expect_eq "$RC_a $RC_b" "0 0" "kinds=node, the host with group rank 1: the job ends well ($(show a b))"
na=$(faults a) nb=$(faults b)
(( na + nb >= 1 )) || fail "kinds=node, the host with group rank 1: no chaos_fault record ($(show a b))"
expect_eq "$(cat "$T/a.jsonl" "$T/b.jsonl" | python3 -c '
import json, sys
print(" ".join(sorted({e["kind"] for e in map(json.loads, sys.stdin) if e["event"] == "chaos_fault"})))')" kill \
  "kinds=node, the host with group rank 1: kills only"
ok "kinds=node where the rendezvous's host has group rank 1: $na + $nb kills, no node fault, the job ended well"

# 4. Only one of two nodes asks: the other is refused in one line naming it, exit 69.
next_port
rdzv=(--nnodes=2 --nproc_per_node=1 --max_restarts=3 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
      --rdzv_id="chaos4-$$")
node 127.0.0.2 a "${rdzv[@]}" --chaos=mtbf=5,seed=1 "$T/steps"
wait_for 30 grep -q "REHEARSAL OF FAILURES" "$T/a.err"
node 127.0.0.3 b "${rdzv[@]}" "$T/steps"
finish_within 30 b
expect_eq "$RC_b" 69 "the node without --chaos: exit code ($(show a b))"
expect_in "$T/b.err" "--chaos differs: node .* \(127.0.0.3\) has --chaos=off but rendezvous 'chaos4-$$' has --chaos=mtbf=5,kinds=kill,seed=1; .*give every node the same --chaos"
wait_for 10 grep -q "refused a .*: --chaos differs: node .* (127.0.0.3) has --chaos=off" "$T/a.err"
kill "$PID_a"
finish_within 30 a
ok "one node of two asks for --chaos: the other refused in one line naming it, the host says so too"
wait_for 10 no_leftovers
