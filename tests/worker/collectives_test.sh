#!/usr/bin/env bash
# Every collective gives the right result on every rank, for world sizes 1 (no launcher), 2, 3.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "$RANK_DRIVER" collectives "$T"
[[ -f "$T/collectives.0" ]] || fail "world size 1 without a launcher"
ok "world size 1 without a launcher: $(cat "$T/collectives.0")"
for w in 2 3; do
  rm -f "$T"/collectives.*
  "$DDPRUN" --nproc_per_node=$w "$RANK_DRIVER" collectives "$T"
  for r in $(seq 0 $((w - 1))); do
    expect_eq "$(cat "$T/collectives.$r")" "gloo $w" "rank $r of $w"
  done
  ok "world size $w: all_reduce sum/min/max, reduce_mean, broadcast, all_gather, all_gather_bytes, barrier"
done
