#!/usr/bin/env bash
# A node's ddprun SIGKILLed (issue 43): the TCP host counts a node lost at once when its connection
# ends, so that connection must not end before the node's workers are dead. The orphan guard holds
# a copy of it (launcher/process/orphan_guard.hpp) and closes it only after it has killed the
# workers and seen them dead. Made visible here by freezing b's guard (the cgroup freezer: a
# SIGSTOP would not hold, since the kernel sends SIGCONT to a stopped process whose group its
# parent's death orphans) before b's ddprun is killed: b's connection then stays open, the child
# of b's worker lives on, and the host must count b lost only by its silence (heartbeat_timeout),
# never by "closed the connection"; once the guard thaws, it kills what b's worker left.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

# The worker's child stands for what a worker leaves running (a data loader's processes): the
# worker itself dies with its ddprun (PR_SET_PDEATHSIG), its process group only by the guard.
freezer=/sys/fs/cgroup/freezer
[[ -w $freezer ]] || skip "needs cgroup v1's freezer at $freezer (root)"
frozen=$freezer/ddprun-test-$$
mkdir "$frozen"
# Thawed and removed however the test ends (the cgroup goes once the guard has left it by exiting).
unfreeze() { echo THAWED > "$frozen/freezer.state" 2>/dev/null || true; for _ in $(seq 50); do rmdir "$frozen" 2>/dev/null && break; sleep 0.1; done; }
trap 'rc=$?; unfreeze || true; cleanup $rc' EXIT

worker life <<'SH'
#!/bin/sh
sleep 600 &
echo $! > "$T/worker.$RANK"
wait
SH
job=(--nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port --rdzv_id=killed
     --rdzv_conf=heartbeat_timeout=3,last_call_timeout=1)
node 127.0.0.2 a "${job[@]}" "$T/life"
# b without a cgroup: any ddprun that starts on this machine meanwhile (another test's) empties the
# cgroups of dead ddprun processes (Containment::remove_stale), and would kill what b's worker
# left before the guard thaws. Without one, only the guard kills it, by the worker's process group.
DDPRUN_CGROUP=0 node 127.0.0.3 b "${job[@]}" "$T/life"
wait_for 60 test -s "$T/worker.0" -a -s "$T/worker.1"
guard=$(pgrep -f "orphan guard of $PID_b")
[[ -n $guard ]] || fail "b's orphan guard not found"
b_worker=$(cat "$T/worker.1")
[[ $(ls -l "/proc/$guard/fd" | grep -c socket) -ge 2 ]] || fail "b's guard holds no copy of b's connection ($(ls -l "/proc/$guard/fd"))"

echo "$guard" > "$frozen/tasks"
echo FROZEN > "$frozen/freezer.state"
wait_for 10 grep -q FROZEN "$frozen/freezer.state"
kill -KILL "$PID_b"
finish b
# The host hears of b only by its silence: 3 s, and b's worker still runs meanwhile.
wait_for 60 grep -q "was lost" "$T/a.err"
expect_in "$T/a.err" "was lost: it sent nothing, not even a heartbeat, for 3 s"
expect_not_in "$T/a.err" "closed the connection"
kill -0 "$b_worker" 2>/dev/null || fail "b's worker's child died while b's guard was frozen: the test shows nothing"
echo THAWED > "$frozen/freezer.state"
worker_gone() { ! kill -0 "$b_worker" 2>/dev/null || [[ $(ps -o stat= -p "$b_worker") == Z* ]]; }
wait_for 30 worker_gone
ok "b's ddprun SIGKILLed with its guard frozen: its connection stayed open, the host counted b lost by silence, the guard killed what b's worker left when it ran"
kill -TERM "$PID_a"
finish a
wait_for 30 no_leftovers
