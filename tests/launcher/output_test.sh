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
run_ddprun logs --nproc_per_node=2 --max_restarts=1 --rdzv_id=job7 --log_dir "$T/logs" "$T/talk"
expect_eq "$RC" 0 "log_dir run"
run=$(run_dir "$T/logs")
[[ $(basename "$run") =~ ^job7_[A-Za-z0-9]{6}$ ]] || fail "the run's folder is <run id>_<random>: $run"
expect_eq "$(grep -c "^ddprun: worker logs in $run$" "$T/logs.err")" 1 "lines saying where the logs are"
for a in 0 1; do for r in 0 1; do
  expect_eq "$(cat "$run/attempt_$a/rank_$r/stdout.log")" "out $r attempt $a" "stdout.log attempt $a rank $r"
  expect_eq "$(cat "$run/attempt_$a/rank_$r/stderr.log")" "err $r" "stderr.log attempt $a rank $r"
done; done
expect_in "$T/logs.out" '^\[rank0\]: out 0 attempt 1$'
# A second run with the same --log_dir (and run id) keeps the first run's logs.
rm -f "$T"/said.*
run_ddprun logs2 --nproc_per_node=2 --max_restarts=1 --rdzv_id=job7 --log_dir "$T/logs" "$T/talk"
expect_eq "$RC" 0 "second log_dir run"
run2=$(sed -n 's/^ddprun: worker logs in //p' "$T/logs2.err")
[[ -d $run2 && $run2 != "$run" && $(dirname "$run2") == "$T/logs" ]] || fail "the second run's folder: '$run2' (first: $run)"
expect_eq "$(ls "$T/logs" | wc -l)" 2 "run folders after two runs"
expect_eq "$(cat "$run/attempt_1/rank_0/stdout.log")" "out 0 attempt 1" "the first run's log after the second run"
expect_eq "$(cat "$run2/attempt_1/rank_1/stdout.log")" "out 1 attempt 1" "the second run's log"
ok "--log_dir keeps <run id>_<random>/attempt_N/rank_R/{stdout,stderr}.log, one folder per run, and says where"

worker say <<'SH'
#!/bin/sh
echo "out $RANK attempt $TORCHELASTIC_RESTART_COUNT"
echo "err $RANK" >&2
SH
run_ddprun redirect --nproc_per_node=2 --redirects=1 --log_dir "$T/rlogs" "$T/say"
expect_not_in "$T/redirect.out" 'out [01]'
expect_in "$T/redirect.err" '^\[rank1\]: err 1$'
expect_in "$(run_dir "$T/rlogs")/attempt_0/rank_1/stdout.log" '^out 1 attempt 0$'
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
expect_in "$(run_dir "$T/flogs")/attempt_0/rank_0/stdout.log" '^out 0'
ok "--local_ranks_filter filters the console only"
