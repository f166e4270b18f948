#!/usr/bin/env bash
# Bad input: one line naming the flag or value, exit 64, nothing started.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker marker <<'SH'
#!/bin/sh
touch "$T/started"
SH
echo '{"nproc_per_node": 2' > "$T/broken.json"
echo '{"nprocs": 2}' > "$T/unknown.json"
check() {
  local expected=$1; shift
  run_ddprun bad "$@"
  expect_eq "$RC" 64 "exit code for: $*"
  expect_eq "$(wc -l < "$T/bad.err")" 1 "one line for: $* ($(cat "$T/bad.err"))"
  expect_in "$T/bad.err" "^ddprun: error: $expected"
  [[ ! -e "$T/started" ]] || fail "a worker started for: $*"
  [[ ! -s "$T/bad.out" ]] || fail "stdout not empty for: $*"
}
check "unknown option --bogus" --bogus "$T/marker"
# An empty value is that option's value, never the next argument's.
check "--nproc_per_node=: expected" --nproc_per_node= "$T/marker"
check "--max_restarts=: expected" --max_restarts= --nproc_per_node=2 "$T/marker"
check "--config=: expected the path of a JSON file" --config= "$T/marker"
check "unknown option --nproc_per_nodes" --nproc_per_nodes=2 "$T/marker"
check "--nproc_per_node=0: expected" --nproc_per_node=0 "$T/marker"
check "--nproc_per_node=-1: expected" --nproc_per_node=-1 "$T/marker"
check "--nproc_per_node=many: expected" --nproc_per_node=many "$T/marker"
check "--nnodes=0: expected" --nnodes=0 "$T/marker"
check "--nnodes=3:2: MIN is larger than MAX" --nnodes=3:2 "$T/marker"
check "--node_rank=2: must be less than --nnodes \(2\)" --nnodes=2 --node_rank=2 "$T/marker"
check "--master_port=0: expected a port in 1..65535" --master_port=0 "$T/marker"
check "--master_port=70000: expected a port in 1..65535" --master_port 70000 "$T/marker"
check "--max_restarts=-3: expected" --max_restarts=-3 "$T/marker"
check "missing PROGRAM" --nproc_per_node=2
check "--config $T/absent.json: cannot open the file" --config "$T/absent.json" "$T/marker"
check "--config $T/broken.json: not valid JSON" --config "$T/broken.json" "$T/marker"
check "--config $T/unknown.json: unknown key \"nprocs\"" --config "$T/unknown.json" "$T/marker"
check "--nproc_per_node: 1 required" --nproc_per_node
check "--rdzv_endpoint=localhost:29400x: bad port '29400x'; expected HOST\[:PORT\]" --rdzv_endpoint=localhost:29400x "$T/marker"
check "--rdzv_endpoint=localhost:70000: bad port '70000'" --rdzv_endpoint=localhost:70000 "$T/marker"
check "--rdzv_endpoint=:29400: no host" --rdzv_endpoint=:29400 "$T/marker"
check "--rdzv_endpoint=\[::1:29400: no '\]'" --rdzv_endpoint=[::1:29400 "$T/marker"
check "--rdzv_endpoint=h:x: bad port" --rdzv_backend=c10d --rdzv_endpoint=h:x "$T/marker"
PET_NPROC_PER_NODE=zero run_ddprun bad "$T/marker"
expect_eq "$RC" 64 "bad PET_ value"
expect_in "$T/bad.err" "nproc_per_node=zero"
ok "every bad input is one line, exit 64, nothing started"

# Options after the program belong to the program.
"$DDPRUN" "$T/marker" --bogus --nproc_per_node=0
[[ -e "$T/started" ]] || fail "options after PROGRAM were not passed through"
ok "options after PROGRAM pass through untouched"

# "--log_dir=" is an empty value (no log folder), not a swallowed "--nproc_per_node=2".
worker count <<'SH'
#!/bin/sh
touch "$T/rank.$RANK"
SH
(cd "$T" && "$DDPRUN" --log_dir= --nproc_per_node=2 "$T/count")
[[ -e "$T/rank.1" ]] || fail "--log_dir= swallowed --nproc_per_node=2: $(ls "$T")"
[[ ! -e "$T/--nproc_per_node=2" ]] || fail "--log_dir= made a folder named after the next argument"
ok "an empty --log_dir= leaves the next option alone"
