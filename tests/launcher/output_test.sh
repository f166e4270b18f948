#!/usr/bin/env bash
# Worker output is forwarded line by line with a rank prefix, and kept in log files.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker chatty <<'SH'
#!/usr/bin/python3
import os, sys
rank = os.environ["RANK"]
line = ("AB"[int(rank)] * 3000) + "\n"
for _ in range(2000):
    sys.stdout.write(line)
sys.stdout.flush()
sys.stderr.write(f"to stderr from {rank}\n")
sys.stderr.write("no newline at the end")
SH
run_ddprun chatty --nproc_per_node=2 "$T/chatty"
expect_eq "$RC" 0 "chatty run"
bad=$(/usr/bin/python3 -c '
import sys
good = {"[rank0]: " + "A" * 3000, "[rank1]: " + "B" * 3000}
print(sum(line.rstrip("\n") not in good for line in open(sys.argv[1])))' "$T/chatty.out")
expect_eq "$bad" 0 "lines mixed or unprefixed"
expect_eq "$(grep -c '^\[rank0\]' "$T/chatty.out")" 2000 "rank 0 lines"
expect_eq "$(grep -c '^\[rank1\]' "$T/chatty.out")" 2000 "rank 1 lines"
expect_in "$T/chatty.err" '^\[rank1\]: to stderr from 1$'
expect_in "$T/chatty.err" '^\[rank0\]: no newline at the end$'
ok "4000 long lines from 2 ranks, none mixed; stderr kept apart; last partial line kept"

worker talk <<'SH'
#!/bin/sh
echo "out $RANK attempt $TORCHELASTIC_RESTART_COUNT"
echo "err $RANK" >&2
touch "$T/said.$RANK.$TORCHELASTIC_RESTART_COUNT"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then
  while [ ! -f "$T/said.0.0" ]; do sleep 0.02; done  # fail once rank 0 has spoken
  exit 1
fi
SH
run_ddprun logs --nproc_per_node=2 --max_restarts=1 --log_dir "$T/logs" "$T/talk"
expect_eq "$RC" 0 "log_dir run"
for a in 0 1; do for r in 0 1; do
  expect_eq "$(cat "$T/logs/attempt_$a/rank_$r/stdout.log")" "out $r attempt $a" "stdout.log attempt $a rank $r"
  expect_eq "$(cat "$T/logs/attempt_$a/rank_$r/stderr.log")" "err $r" "stderr.log attempt $a rank $r"
done; done
expect_in "$T/logs.out" '^\[rank0\]: out 0 attempt 1$'
ok "--log_dir keeps attempt_N/rank_R/{stdout,stderr}.log"

worker say <<'SH'
#!/bin/sh
echo "out $RANK attempt $TORCHELASTIC_RESTART_COUNT"
echo "err $RANK" >&2
SH
run_ddprun redirect --nproc_per_node=2 --redirects=1 --log_dir "$T/rlogs" "$T/say"
expect_not_in "$T/redirect.out" 'out [01]'
expect_in "$T/redirect.err" '^\[rank1\]: err 1$'
expect_in "$T/rlogs/attempt_0/rank_1/stdout.log" '^out 1 attempt 0$'
run_ddprun redirect_one --nproc_per_node=2 --redirects=1:3 --log_dir "$T/r1logs" "$T/say"
expect_in "$T/redirect_one.out" '^\[rank0\]: out 0'
expect_not_in "$T/redirect_one.out" 'out 1'
expect_not_in "$T/redirect_one.err" 'err 1'
ok "--redirects sends streams to files only"

run_ddprun tee --nproc_per_node=2 --tee=3 "$T/say"
dir=$(sed -n 's/^ddprun: worker logs in //p' "$T/tee.err")
[[ -d "$dir" ]] || fail "--tee without --log_dir announces a log folder"
expect_in "$dir/attempt_0/rank_0/stdout.log" '^out 0 attempt 0$'
expect_in "$T/tee.out" '^\[rank0\]: out 0 attempt 0$'
rm -rf "$dir"
ok "--tee writes files and console"

run_ddprun filter --nproc_per_node=2 --local_ranks_filter=1 --log_dir "$T/flogs" "$T/say"
expect_not_in "$T/filter.out" 'rank0'
expect_in "$T/filter.out" '^\[rank1\]: out 1'
expect_in "$T/flogs/attempt_0/rank_0/stdout.log" '^out 0'
ok "--local_ranks_filter filters the console only"

# A console nobody reads (a stalled `| tee`): ddprun keeps reading the workers' pipes (dropping
# what the console cannot take, with a notice), and handles SIGTERM and failures at once.
# Rank 0 writes 24 MB (more than the 16 MiB queue) and then says so: it can only finish if ddprun keeps reading its pipe.
worker spam <<'SH'
#!/bin/bash
trap 'touch "$T/term.$RANK"; exit 0' TERM
if [[ $RANK == 0 ]]; then
  head -c 24000000 /dev/zero | tr '\0' 'x' | fold -w 100
  touch "$T/spammed"
fi
if [[ $RANK == 1 && -n "${FAIL_AFTER_SPAM:-}" ]]; then
  while [[ ! -e $T/spammed ]]; do sleep 0.05; done
  exit 3
fi
while true; do sleep 0.05; done
SH
for case in sigterm failure; do
  rm -f "$T/console" "$T"/term.* "$T/spammed"
  mkfifo "$T/console"
  exec -a "$T/stalled-reader" sleep 300 <"$T/console" &
  reader=$!
  if [[ $case == failure ]]; then export FAIL_AFTER_SPAM=1; else unset FAIL_AFTER_SPAM; fi
  "$DDPRUN" --nproc_per_node=2 "$T/spam" >"$T/console" 2>"$T/stalled.err" &
  pid=$!
  wait_for 60 test -e "$T/spammed"
  if [[ $case == sigterm ]]; then
    kill -TERM "$pid"
    wait_for 10 test -e "$T/term.0" -a -e "$T/term.1"
  else
    wait_for 10 test -e "$T/term.0"
  fi
  kill "$reader"; wait "$reader" 2>/dev/null || true  # the reader goes: ddprun's exit need not wait
  rc=0; wait "$pid" || rc=$?
  if [[ $case == sigterm ]]; then expect_eq "$rc" 143 "exit code after SIGTERM with a stalled console"
  else expect_eq "$rc" 3 "exit code of a failure with a stalled console"; fi
  expect_in "$T/stalled.err" "ddprun: the console \(stdout\) is not keeping up: dropping what does not fit in 16 MiB until it does"
  ok "a console nobody reads: 24 MB of output passed through, $case handled at once"
done
unset FAIL_AFTER_SPAM
