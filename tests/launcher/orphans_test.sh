#!/usr/bin/env bash
# No worker or grandchild outlives ddprun, even when ddprun is SIGKILLed.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker parent <<'SH'
#!/bin/bash
bash -c "exec -a $T/grandchild sleep 300" &
# A grandchild that leaves its parent: it is reparented, but stays in the worker's group.
bash -c "bash -c 'exec -a $T/orphan sleep 300' & exit 0"
touch "$T/ready.$RANK"
exec -a "$T/worker" sleep 300
SH
all_ready() { [[ -f "$T/ready.0" && -f "$T/ready.1" && -f "$T/ready.2" ]]; }
"$DDPRUN" --nproc_per_node=3 "$T/parent" >"$T/out" 2>"$T/err" &
pid=$!
wait_for 30 all_ready
running=$(leftovers)
expect_eq "$(grep -c -- "$T/orphan 300" <<<"$running")" 3 "orphaned grandchildren running before the kill"
start=$(date +%s.%N)
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
wait_for 10 no_leftovers
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" "BEGIN { printf \"%.3f\", e - s }")
ok "ddprun SIGKILLed: workers and grandchildren gone after ${elapsed}s"

# A successful worker's leftover child is cleaned up at the end of the job too.
worker leaves_child <<'SH'
#!/bin/bash
bash -c "exec -a $T/left-behind sleep 300" &
exit 0
SH
"$DDPRUN" "$T/leaves_child"
wait_for 10 no_leftovers
ok "children left by a successful worker are stopped"
