#!/usr/bin/env bash
# A dead or silent peer gives an exception naming the operation, within the timeout; never a hang.
# A model that differs across ranks is refused with the first mismatch named. Ranks that make
# different collective calls (one more backward on one rank) fail with a CommError naming each
# rank's call, recorded in the error file: not a gloo abort (SIGABRT), not a silent mix. A
# worker killed right after printing still shows its last lines (stdout is line-buffered).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

mkdir "$T/dies"
set +e
DDPRUN_COLLECTIVE_TIMEOUT=60 "$DDPRUN" --nproc_per_node=2 --shutdown_timeout=60 "$RANK_DRIVER" peer_dies "$T/dies" \
  >"$T/dies.out" 2>"$T/dies.err"
rc=$?
set -e
expect_eq "$rc" 137 "ddprun's exit code when rank 1 is SIGKILLed"
expect_in "$T/dies/result" "^CommError: .*all_reduce"
seconds=$(sed -n 's/^seconds //p' "$T/dies/result")
awk -v s="$seconds" 'BEGIN { exit !(s < 60) }' || fail "peer death noticed after ${seconds}s"
ok "peer killed mid-all_reduce: CommError after ${seconds}s (timeout 60 s)"

mkdir "$T/hangs"
DDPRUN_COLLECTIVE_TIMEOUT=2 "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" peer_hangs "$T/hangs" >"$T/hangs.out" 2>&1 \
  || { cat "$T/hangs.out"; fail "peer_hangs run"; }
expect_in "$T/hangs/result" "^CommError: .*all_reduce.*2(\.0)? ?s"
seconds=$(sed -n 's/^seconds //p' "$T/hangs/result")
awk -v s="$seconds" 'BEGIN { exit !(s >= 1.5 && s < 60) }' || fail "hung peer reported after ${seconds}s"
ok "silent peer: CommError naming all_reduce after ${seconds}s (timeout 2 s)"

mkdir "$T/mismatch"
"$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" mismatch "$T/mismatch" >"$T/mismatch.out" 2>&1 || true
for r in 0 1; do
  expect_in "$T/mismatch/mismatch.$r" "a\.weight"
done
ok "shape mismatch named on every rank: $(head -c 200 "$T/mismatch/mismatch.0")"

set +e
DDPRUN_COLLECTIVE_TIMEOUT=20 "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" extra_backward >"$T/extra.out" 2>&1
rc=$?
set -e
expect_eq "$rc" 1 "ddprun's exit code when rank 0 runs one more backward (an abort would be 134)"
expect_in "$T/extra.out" "root cause: rank [01] .*exit code 1"
expect_in "$T/extra.out" "error: ddprun::CommError: collective mismatch .*rank 0: DistributedDataParallel backward \(1 bucket, 484 Float elements\); rank 1: all_reduce \(sum\) of 1 Float element"
ok "one more backward on rank 0: CommError naming both ranks' calls, in ddprun's summary"

set +e
"$DDPRUN" --nproc_per_node=1 "$RANK_DRIVER" last_words >"$T/last.out" 2>&1
rc=$?
set -e
expect_eq "$rc" 137 "exit code of a worker killed by SIGKILL"
expect_in "$T/last.out" "last words from printf"
expect_in "$T/last.out" "last words from std::cout"
ok "a worker SIGKILLed right after printing: its last lines reach ddprun"
