#!/usr/bin/env bash
# --debug: one worker in the foreground with the terminal and stdin, world size 1, no
# restarts, no output capture.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker interactive <<'SH'
#!/bin/sh
echo "world=$WORLD_SIZE rank=$RANK"
read line
echo "got $line"
SH
out=$(echo hello | "$DDPRUN" --debug "$T/interactive")
expect_eq "$out" "world=1 rank=0
got hello" "stdin attached, output not prefixed"

worker tty <<'SH'
#!/bin/sh
[ -t 0 ] && [ -t 1 ] && echo "has a terminal"
[ "$(ps -o tpgid= -p $$ | tr -d ' ')" = "$(ps -o pgid= -p $$ | tr -d ' ')" ] && echo "in the foreground"
SH
script -qec "$DDPRUN --debug $T/tty" /dev/null > "$T/tty.out"
expect_in "$T/tty.out" "has a terminal"
expect_in "$T/tty.out" "in the foreground"
ok "the worker owns the terminal"

worker fails <<'SH'
#!/bin/sh
echo run >> "$T/runs"
exit 4
SH
run_ddprun fails --debug --max_restarts=3 "$T/fails"
expect_eq "$RC" 4 "debug exit code"
expect_eq "$(wc -l < "$T/runs")" 1 "no restarts in debug mode"
run_ddprun two --debug --nproc_per_node=2 "$T/fails"
expect_eq "$RC" 64 "debug with two workers"
ok "--debug: exit code, no restarts, one worker"
