#!/usr/bin/env bash
# --health_check (issue 56): a check before each round the node joins. Exit 0 joins; 1 makes the
# node leave as quarantined (exit 71, the check's last lines in the summary, the result file and
# the event log); 2, any other end, or its deadline warns and joins. The check never blocks
# ddprun's loop (a SIGTERM meanwhile stops ddprun at once) and leaves nothing behind. Then two
# nodes: the other node sees the quarantined one leave and finishes the job without it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
# literally TEXT: TEXT as an extended regular expression that matches only itself.
literally() { sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$1"; }

# The check passes before the first join and fails (exit 1) before the second: what a node
# whose GPU falls off the bus during the first round would see.
worker check_second <<'SH'
#!/bin/sh
echo "$DDPRUN_HEALTH_CHECK_ATTEMPT $TORCHELASTIC_RESTART_COUNT $LOCAL_WORLD_SIZE" >> "$T/checks.$1"
if [ "$DDPRUN_HEALTH_CHECK_ATTEMPT" = 0 ]; then
  echo "all GPUs healthy"
  exit 0
fi
echo "GPU 0: ok"
echo "GPU 1: Xid 79, fallen off the bus" >&2
exit 1
SH
worker fails_once <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/runs.$1"
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 3
exit 0
SH

# (a) Passes, the worker fails once, fails before the second round: exit 71, no second round.
run_ddprun second --max_restarts=2 --health_check="$T/check_second one" --result_file="$T/second.json" \
  --event_log="$T/second.jsonl" "$T/fails_once" one
expect_eq "$RC" 71 "a check that fails before the second round ($(cat "$T/second.err"))"
expect_eq "$(tr '\n' ' ' < "$T/runs.one")" "0 " "the workers' rounds"
expect_eq "$(tr '\n' ';' < "$T/checks.one")" "0 0 1;1 0 1;" "the checks (attempt, restarts, local world size)"
host=$(hostname)
expect_in "$T/second.err" "$(literally "ddprun: this node ($host) is quarantined: its health check \`$T/check_second one\` exited 1; it leaves the job; exit 71 so that the scheduler can drain this host")"
expect_in "$T/second.err" "^ddprun: the health check's last 2 lines of output:$"
expect_in "$T/second.err" "^  GPU 0: ok$"
expect_in "$T/second.err" "^  GPU 1: Xid 79, fallen off the bus$"
expect_not_in "$T/second.err" "restarting workers"
expect_eq "$(json_field "$T/second.json" '["exit_code"]')" 71 "result file: exit code"
expect_eq "$(json_field "$T/second.json" '["kind"]')" quarantined "result file: kind"
expect_eq "$(json_field "$T/second.json" '["health_check"]["exit_code"]')" 1 "result file: the check's exit code"
expect_eq "$(json_field "$T/second.json" '["health_check"]["output"]')" "['GPU 0: ok', 'GPU 1: Xid 79, fallen off the bus']" \
  "result file: the check's last lines"
expect_eq "$(events "$T/second.jsonl" health_check result | tr '\n' ' ')" "passed failed " "event log: the checks"
expect_eq "$(events "$T/second.jsonl" quarantined node)" "$host" "event log: this node quarantined"
expect_eq "$(round_events "$T/second.jsonl")" "round_started round_ended exit " "event log: one round"
ok "a check that passes, then exits 1 before the second round: exit 71, its lines in the summary, result file and event log"

# (a') Exit 1 before the first join: the node never joins, no worker starts.
worker unfit <<'SH'
#!/bin/sh
echo "ECC errors over the limit"
exit 1
SH
run_ddprun first --health_check="$T/unfit" --result_file="$T/first.json" "$T/fails_once" first
expect_eq "$RC" 71 "a check that fails before the first join ($(cat "$T/first.err"))"
[[ ! -e "$T/runs.first" ]] || fail "a worker started on a node whose check failed"
expect_in "$T/first.err" "^  ECC errors over the limit$"
expect_eq "$(json_field "$T/first.json" '["health_check"]["output"]')" "['ECC errors over the limit']" "result file: its line"
ok "a check that exits 1 before the first join: exit 71, no worker started"

# (b) A check that hangs, with a child of its own: cut at its deadline with a warning, its whole
# process group killed; the node joins and the job finishes.
worker hangs <<'SH'
#!/bin/sh
echo "checking the fabric"
sh -c 'sleep 600; :' "hang-child-$T" &
touch "$T/hang.started"
wait
SH
worker ok_worker <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT" >> "$T/runs.$1"
SH
start=$SECONDS
run_ddprun hang --health_check="$T/hangs" --health_check_timeout=1 --event_log="$T/hang.jsonl" "$T/ok_worker" hang
expect_eq "$RC" 0 "a check that hangs ($(cat "$T/hang.err"))"
(( SECONDS - start < 60 )) || fail "the hanging check was not cut at its deadline: $((SECONDS - start)) s"
expect_in "$T/hang.err" "^$(literally "ddprun: warning: the health check \`$T/hangs\` timed out after 1 s (--health_check_timeout); joining anyway")"
expect_eq "$(grep -c "health check" "$T/hang.err")" 1 "one warning line"
expect_eq "$(cat "$T/runs.hang")" 0 "the worker ran"
expect_eq "$(events "$T/hang.jsonl" health_check result)" warning "event log: the check's warning"
wait_for 10 no_leftovers
ok "a check that hangs: cut at its deadline (its group killed), one warning, the job runs and ends 0"

# (c) Exit 2 (the check itself could not run): a warning, and the node joins.
worker broken <<'SH'
#!/bin/sh
echo "dcgmi: not found" >&2
exit 2
SH
run_ddprun two --health_check="$T/broken" "$T/ok_worker" two
expect_eq "$RC" 0 "a check that exits 2 ($(cat "$T/two.err"))"
expect_in "$T/two.err" "^$(literally "ddprun: warning: the health check \`$T/broken\` exited 2; joining anyway")"
expect_eq "$(cat "$T/runs.two")" 0 "the worker ran"
ok "a check that exits 2: one warning, the node joins"

# (d) SIGTERM while the check runs: ddprun's loop is not blocked; it stops at once, the check's
# group with it.
rm -f "$T/hang.started"
"$DDPRUN" --health_check="$T/hangs" --health_check_timeout=600 "$T/ok_worker" term >"$T/term.out" 2>"$T/term.err" &
pid=$!
wait_for 60 test -e "$T/hang.started"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
expect_eq "$rc" 143 "SIGTERM during the check ($(cat "$T/term.err"))"
[[ ! -e "$T/runs.term" ]] || fail "a worker started after SIGTERM"
wait_for 10 no_leftovers
ok "SIGTERM while the check runs: exit 143 at once, the check's group killed, no worker started"

# (e) Two nodes (--nnodes=1:2, c10d, a hosts the rendezvous): b's worker fails in the first
# round, b's check fails before the second; b leaves as quarantined (71) and a finishes the job
# without it (0), its event log and summary naming b.
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
worker pair_worker <<'SH'
#!/bin/sh
echo "$TORCHELASTIC_RESTART_COUNT $WORLD_SIZE" >> "$T/pair.$1"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$1" = b ]; then
    while [ ! -s "$T/pair.a" ]; do sleep 0.05; done  # fail once a's worker surely runs
    exit 3
  fi
  exec sleep 120
fi
exit 0
SH
job=(--nnodes=1:2 --nproc_per_node=1 --max_restarts=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
     --rdzv_id=health --rdzv_conf=join_timeout=60,heartbeat_timeout=5)
node 127.0.0.3 b "${job[@]}" --health_check="$T/check_second b" "$T/pair_worker" b
node 127.0.0.2 a "${job[@]}" --event_log="$T/a.events" "$T/pair_worker" a
finish_within 120 a
finish_within 60 b
expect_eq "$RC_a $RC_b" "0 71" "two nodes: a finishes, b leaves quarantined ($(show a b))"
expect_eq "$(tr '\n' ';' < "$T/pair.a")" "0 2;1 1;" "a's rounds (restarts, world size)"
expect_eq "$(tr '\n' ';' < "$T/pair.b")" "0 2;" "b's rounds"
victim="$host (127.0.0.3)"
why="its health check \`$T/check_second b\` exited 1"
expect_in "$T/b.err" "$(literally "this node ($host) is quarantined: $why; it leaves the job; exit 71")"
expect_in "$T/a.err" "$(literally "quarantined during the job: $victim: $why")"
expect_in "$T/a.events" "\"event\":\"quarantined\".*\"node\":\"$(literally "$victim")\""
wait_for 10 no_leftovers
ok "two nodes: the node whose check exits 1 leaves as quarantined (71); the other sees it and finishes the job (0)"
