#!/usr/bin/env bash
# --progress_pattern with real workers (bash scripts that print "step N" and never touch their
# heartbeat file): a rank that stops printing is found hung --hang_timeout after its last line,
# named with its last step, where without the pattern only --hang_startup finds it; the quiet
# warning without --hang_timeout (DDPRUN_QUIET_WARNING_SECONDS shortens its 600 s); a bad pattern.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

# stepper: rank 0 prints "step N" on stdout every 0.1 s until $T/go or $T/stop exists; rank 1 prints
# "step 1".."step 3" on stderr, writes the time of its last line, then waits silently for $T/go,
# prints "step 4", and waits silently for $T/stop; rank 2 prints nothing that matches.
worker stepper <<'SH'
#!/bin/bash
case "$RANK" in
  0) n=0; while [ ! -e "$T/stop" ] && [ ! -e "$T/go" ]; do n=$((n + 1)); echo "step $n"; sleep 0.1; done
     while [ ! -e "$T/stop" ]; do sleep 0.1; done ;;
  1) for n in 1 2 3; do echo "step $n" >&2; [ $n = 3 ] && date +%s.%N > "$T/lastline.1"; sleep 0.1; done
     while [ ! -e "$T/go" ] && [ ! -e "$T/stop" ]; do sleep 0.1; done
     echo "step 4" >&2
     while [ ! -e "$T/stop" ]; do sleep 0.1; done ;;
  *) echo "rank $RANK: no steps here"; while [ ! -e "$T/stop" ]; do sleep 0.1; done ;;
esac
SH


# 1. With the pattern, rank 1 is hung 5 s after its last line, on stderr, and its step is named.
run_ddprun pattern --nproc_per_node=2 --hang_timeout=5 --hang_startup=20 \
  --progress_pattern='^step (?<step>[0-9]+)' --event_log="$T/pattern.jsonl" "$T/stepper"
expect_eq "$RC" 124 "exit code of a hung job found through its output"
expect_in "$T/pattern.err" "rank 1 hung: no progress for [5-9]\.[0-9] s \(hang timeout 5\.0 s; last step 3\)"
expect_in "$T/pattern.jsonl" '"event":"hang".*"last_step":3.*"rank":1'
expect_not_in "$T/pattern.jsonl" '"event":"hang".*"rank":0'
d=$(hang_delay "$T/pattern.jsonl" 1 "$T/lastline.1")
within 4.9 15 "$d" || fail "rank 1 found hung ${d}s after its last line, with --hang_timeout=5"
ok "a rank whose output stops matching is hung after --hang_timeout (${d}s), with its last step"

# 2. Without the pattern the same program has no progress at all: only --hang_startup (20 s from
#    the start) finds it, long after the 5 s above.
rm -f "$T/lastline.1"
run_ddprun nopattern --nproc_per_node=2 --hang_timeout=5 --hang_startup=20 --event_log="$T/nopattern.jsonl" "$T/stepper"
expect_eq "$RC" 124 "exit code without a pattern"
expect_in "$T/nopattern.err" "no heartbeat since it started 2[0-9]\.[0-9] s ago \(--hang_startup=20\)"
d=$(hang_delay "$T/nopattern.jsonl" 1 "$T/lastline.1")
within 15 60 "$d" || fail "without a pattern, rank 1 found hung ${d}s after its last line; expected --hang_startup"
ok "without the pattern it is found only after --hang_startup (${d}s after its last line)"

# 3. No --hang_timeout: one warning per silence of a rank that made progress, naming its last
#    step, from stderr (rank 1) and stdout (rank 0); none for a rank that never made progress (2)
#    nor while one keeps going; nothing is stopped.
DDPRUN_QUIET_WARNING_SECONDS=2 "$DDPRUN" --nproc_per_node=3 --progress_pattern='^step (?<step>[0-9]+)' \
  --progress_pattern='^epoch' --event_log="$T/quiet.jsonl" "$T/stepper" >"$T/quiet.out" 2>"$T/quiet.err" &
pid=$!
quiet_lines() { grep -c "made no progress" "$T/quiet.err" || true; }
wait_for 60 grep -q "ddprun: rank 1 made no progress for 2 s (last step 3); with --hang_timeout off ddprun only warns" "$T/quiet.err"
expect_eq "$(quiet_lines)" 1 "warnings after rank 1's first silence"
touch "$T/go"
# Rank 1 prints step 4 and falls silent again; rank 0 (its steps were on stdout) stops too.
wait_for 60 grep -q "ddprun: rank 1 made no progress for 2 s (last step 4)" "$T/quiet.err"
wait_for 60 grep -Eq "ddprun: rank 0 made no progress for 2 s \(last step [1-9][0-9]*\)" "$T/quiet.err"
expect_eq "$(quiet_lines)" 3 "warnings after both ranks' silence"
touch "$T/stop"
set +e; wait "$pid"; RC=$?; set -e
expect_eq "$RC" 0 "exit code after quiet warnings"
expect_eq "$(quiet_lines)" 3 "warnings in all"
expect_in "$T/quiet.jsonl" '"event":"quiet".*"last_step":4.*"rank":1'
expect_in "$T/quiet.jsonl" '"event":"quiet".*"rank":0'
expect_not_in "$T/quiet.jsonl" '"event":"quiet".*"rank":2'
ok "without --hang_timeout: one warning per silence, with the last step; no action"

# 3b. A rank that finished is not judged: rank 0 prints its one step and exits 0; rank 1 prints
# its step later and hangs. Rank 0's silence since its exit is no hang (it once was: found
# "hung" first and skipped as gone, it turned hang detection off for the round, and the job
# hung for ever); rank 1 is found hung --hang_timeout after its step.
worker early_done <<'SH'
#!/bin/bash
if [ "$RANK" = 0 ]; then echo "step 1"; touch "$T/rank0_done"; exit 0; fi
while [ ! -e "$T/rank0_done" ]; do sleep 0.05; done
sleep 0.5
echo "step 1"
exec -a "stuck $T" sleep 1000
SH
"$DDPRUN" --nproc_per_node=2 --hang_timeout=3 --hang_startup=20 --progress_pattern='^step (?<step>[0-9]+)' \
  "$T/early_done" >"$T/early.out" 2>"$T/early.err" &
pid=$!
wait_for 60 grep -q "rank 1 hung" "$T/early.err"
set +e; wait "$pid"; RC=$?; set -e
expect_eq "$RC" 124 "exit code of a job whose rank 1 hangs after rank 0 finished ($(cat "$T/early.err"))"
expect_in "$T/early.err" "rank 1 hung: no progress for [3-9]\.[0-9] s \(hang timeout 3\.0 s; last step 1\)"
expect_not_in "$T/early.err" "rank 0 hung"
wait_for 10 no_leftovers
ok "a rank that finished early is not judged: the one that hangs after it is found"

# 4. A bad pattern: one line naming the flag and the value, exit 64, nothing started.
rm -f "$T/lastline.1"
run_ddprun bad --progress_pattern='step (' "$T/stepper"
expect_eq "$RC" 64 "exit code of a bad --progress_pattern"
expect_in "$T/bad.err" "^ddprun: error: --progress_pattern=step \(: Mismatched"
expect_eq "$(wc -l <"$T/bad.err")" 1 "lines of the error"
run_ddprun named --progress_pattern='(?<epoch>[0-9]+)' "$T/stepper"
expect_eq "$RC" 64 "exit code of an unknown named group"
expect_in "$T/named.err" "only named group understood is \(\?<step>...\)"
[[ ! -e "$T/lastline.1" ]] || fail "a worker started despite a bad pattern"
ok "a bad pattern is a usage error before anything starts"

wait_for 10 no_leftovers
