#!/usr/bin/env bash
# Failures restart the whole group up to --max_restarts; stubborn workers are SIGKILLed.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker flaky <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/attempts.$RANK"
if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  while [ ! -s "$T/attempts.0" ]; do sleep 0.05; done  # fail once rank 0 is surely running
  exit 2
fi
[ "$RANK" = 0 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 30
exit 0
SH
run_ddprun flaky --nproc_per_node=2 --max_restarts=2 --event_log="$T/flaky.jsonl" "$T/flaky"
expect_eq "$RC" 0 "crash then success"
expect_eq "$(tr '\n' ' ' < "$T/attempts.0")" "0 1 " "rank 0 attempts"
expect_eq "$(tr '\n' ' ' < "$T/attempts.1")" "0 1 " "rank 1 attempts"
expect_in "$T/flaky.err" "rank 1 \(local rank 1\) failed: exit code 2; stopping the other workers"
expect_in "$T/flaky.err" "restarting workers \(restart 1 of 2\)"
ok "crash -> restart -> success, restart count visible"
# Each round ends once, also the last one, which the job's end follows at once.
expect_eq "$(round_events "$T/flaky.jsonl")" "round_started round_ended round_started round_ended exit " "rounds' ends"
ok "each round ends once (round_ended), the last one too"

worker always <<'SH'
#!/bin/sh
echo x >> "$T/runs.$RANK"
[ "$RANK" = 0 ] && exit 5
exec sleep 30
SH
run_ddprun always --nproc_per_node=2 --max_restarts=2 "$T/always"
expect_eq "$RC" 5 "restarts exhausted"
expect_eq "$(wc -l < "$T/runs.0")" 3 "attempts with 2 restarts"
expect_in "$T/always.err" "always failed \(exit code 5\) after 2 restarts"
expect_in "$T/always.err" "root cause: rank 0 \(local rank 0\)"
ok "restarts exhausted -> summary and exit code"

# A worker that ignores SIGTERM is killed after the grace period.
worker stubborn <<'SH'
#!/bin/bash
if [ "$RANK" = 0 ]; then
  trap 'echo got-term > "$T/term"' TERM
  touch "$T/ready"
  while :; do sleep 0.1; done
fi
while [ ! -f "$T/ready" ]; do sleep 0.05; done
exit 9
SH
run_ddprun stubborn --nproc_per_node=2 --shutdown_timeout=1 "$T/stubborn"
expect_eq "$RC" 9 "stubborn group"
[[ -f "$T/term" ]] || fail "rank 0 did not get SIGTERM first"
wait_for 10 no_leftovers
ok "SIGTERM, grace period, SIGKILL"
