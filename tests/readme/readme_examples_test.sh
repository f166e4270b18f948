#!/usr/bin/env bash
# Each program built from a README's cpp block (arguments) runs to the end alone (world size 1)
# and under ddprun with 2 workers.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
(( $# > 0 )) || fail "no README examples were built"
for program in "$@"; do
  name=$(basename "$program")
  mkdir "$T/$name" && cd "$T/$name"
  env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "$program" >alone.out 2>&1 || { cat alone.out; fail "$name alone"; }
  rm -rf checkpoints
  "$DDPRUN" --nproc_per_node=2 "$program" >ddprun.out 2>&1 || { cat ddprun.out; fail "$name under ddprun"; }
  ok "$name: runs alone and under ddprun --nproc_per_node=2"
done
