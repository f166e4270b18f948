#!/usr/bin/env bash
# Shutdown signals stop the whole group and ddprun exits 128+signal; SIGUSR1/2 only reach the
# workers, which go on.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker sleeper <<'SH'
#!/bin/bash
bash -c "exec -a $T/grandchild sleep 300" &
touch "$T/ready.$RANK"
wait
SH
all_ready() { [[ -f "$T/ready.0" && -f "$T/ready.1" ]]; }
for sig in TERM INT HUP QUIT; do
  rm -f "$T"/ready.*
  "$DDPRUN" --nproc_per_node=2 --shutdown_timeout=3 --event_log="$T/$sig.jsonl" "$T/sleeper" >"$T/$sig.out" 2>"$T/$sig.err" &
  pid=$!
  wait_for 30 all_ready
  kill -s "$sig" "$pid"
  set +e; wait "$pid"; rc=$?; set -e
  expect_eq "$rc" "$((128 + $(kill -l "$sig")))" "exit code after SIG$sig"
  expect_in "$T/$sig.err" "stopped by SIG$sig"
  # The round stopped by the signal ends once, in the exit (it is never reported).
  expect_eq "$(round_events "$T/$sig.jsonl")" "round_started round_ended exit " "the round's end after SIG$sig"
  wait_for 10 no_leftovers
  ok "SIG$sig stops everything, exit $rc"
done

worker checkpointer <<'SH'
#!/bin/bash
trap 'echo "$RANK" > "$T/usr1.$RANK"' USR1
touch "$T/ready.$RANK"
while [ ! -f "$T/go" ]; do sleep 0.05; done
echo done > "$T/done.$RANK"
SH
rm -f "$T"/ready.*
"$DDPRUN" --nproc_per_node=2 "$T/checkpointer" >"$T/usr1.out" 2>"$T/usr1.err" &
pid=$!
wait_for 30 all_ready
kill -USR1 "$pid"
both_got_usr1() { [[ -f "$T/usr1.0" && -f "$T/usr1.1" ]]; }
wait_for 30 both_got_usr1
kill -0 "$pid" || fail "ddprun exited after SIGUSR1"
touch "$T/go"
set +e; wait "$pid"; rc=$?; set -e
expect_eq "$rc" 0 "workers finished after SIGUSR1"
[[ -f "$T/done.0" && -f "$T/done.1" ]] || fail "workers did not run on after SIGUSR1"
ok "SIGUSR1 reaches every worker; they keep running"
