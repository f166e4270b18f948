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
  # A 100 kB value is quoted cut short.
  (( $(wc -c < "$T/bad.err") < 500 )) || fail "a line of $(wc -c < "$T/bad.err") bytes for: ${*:0:200}"
  [[ ! -e "$T/started" ]] || fail "a worker started for: $*"
  [[ ! -s "$T/bad.out" ]] || fail "stdout not empty for: $*"
  no_leftovers || fail "processes left for: ${*:0:200}: $(leftovers)"
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
check "--snapshot_replicas=0: expected all, or a number of nodes" --snapshot_replicas=0 "$T/marker"
check "--snapshot_replicas=some: expected all, or a number of nodes" --snapshot_replicas=some "$T/marker"
check "missing PROGRAM" --nproc_per_node=2
check "--config $T/absent.json: cannot open the file" --config "$T/absent.json" "$T/marker"
check "--config $T/broken.json: not valid JSON" --config "$T/broken.json" "$T/marker"
check "--config $T/unknown.json: unknown key \"nprocs\"" --config "$T/unknown.json" "$T/marker"
check "--nproc_per_node: expected a value" --nproc_per_node
check "--rdzv_endpoint=localhost:29400x: bad port '29400x'; expected HOST\[:PORT\]" --rdzv_endpoint=localhost:29400x "$T/marker"
check "--rdzv_endpoint=localhost:70000: bad port '70000'" --rdzv_endpoint=localhost:70000 "$T/marker"
check "--rdzv_endpoint=:29400: no host" --rdzv_endpoint=:29400 "$T/marker"
check "--rdzv_endpoint=\[::1:29400: no '\]'" --rdzv_endpoint=[::1:29400 "$T/marker"
check "--rdzv_endpoint=h:x: bad port" --rdzv_backend=c10d --rdzv_endpoint=h:x "$T/marker"
PET_NPROC_PER_NODE=zero run_ddprun bad "$T/marker"
expect_eq "$RC" 64 "bad PET_ value"
expect_in "$T/bad.err" "^ddprun: error: PET_NPROC_PER_NODE=zero: expected"
ok "every bad input is one line, exit 64, nothing started"

# Issue 16's fault sweep: values that crashed ddprun (std::regex recursion, JSON nested 100,000
# deep), exited 70 for the user's own mistake, or wrapped a timeout around to zero.
digits=$(head -c 100000 /dev/zero | tr '\0' 9)
# 100,000 of one letter: bash's pattern substitution takes seconds of CPU on a string this long.
letters() { head -c 100000 /dev/zero | tr '\0' "$1"; }
long_list=$(head -c 30000 /dev/zero | sed 's/\x0/0:1,/g')x
check "--nnodes=9{80}\.\.\.: expected 1 or more nodes" --nnodes="$digits" "$T/marker"
check "--redirects=(0:1,){20}\.\.\.: expected 0 \(none\)" --redirects="$long_list" "$T/marker"
check "--tee=(0:1,){20}\.\.\.: expected" --tee "$long_list" "$T/marker"
check "--max_restarts=9{80}\.\.\.: expected" --max_restarts="$digits" "$T/marker"
for value in inf nan 1e308 1e10 -1; do
  check "--shutdown_timeout=$value: expected a number of seconds \(0 or more\), at most 1000000000" \
    --shutdown_timeout=$value "$T/marker"
done
check "--hang_timeout=inf: expected" --hang_timeout=inf "$T/marker"
check "--master_addr=h{80}\.\.\.: expected a host name" --master_addr="$(letters h)" "$T/marker"
check "--rdzv_id=j{80}\.\.\.: expected a job id" --rdzv_id="$(letters j)" "$T/marker"
check "--rdzv_conf join_timeout=1e300: expected a number of seconds greater than 0, at most 1000000000" \
  --rdzv_conf=join_timeout=1e300 "$T/marker"
check "--rdzv_conf heartbeat_timeout=1e300: expected" --rdzv_conf=heartbeat_timeout=1e300 "$T/marker"
check "unknown option --y{78}\.\.\." "--$(letters y)" "$T/marker"

# --config files: too deep, too large, wrong types, a folder, unreadable.
head -c 100000 /dev/zero | tr '\0' '[' > "$T/deep.json"
check "--config $T/deep.json: nested deeper than 64 levels" --config "$T/deep.json" "$T/marker"
head -c 2000000 /dev/zero | tr '\0' ' ' > "$T/big.json"
check "--config $T/big.json: larger than 1048576 bytes" --config "$T/big.json" "$T/marker"
echo '{"program": "x", "args": [1]}' > "$T/args.json"
check "--config $T/args.json: \"args\" must be an array of strings" --config "$T/args.json"
echo '{"max_restarts": 1e400}' > "$T/overflow.json"
check "--config $T/overflow.json: not valid JSON \(\[json.exception.out_of_range.406\]" --config "$T/overflow.json" "$T/marker"
check "--config $T: is a folder" --config "$T" "$T/marker"
echo '{}' > "$T/locked.json"
chmod 000 "$T/locked.json"
if [[ ! -r "$T/locked.json" ]]; then  # root reads it anyway
  check "--config $T/locked.json: cannot open the file \(Permission denied\)" --config "$T/locked.json" "$T/marker"
fi

# Paths ddprun cannot use are the user's mistake too, reported before anything starts.
touch "$T/a_file"
check "--log_dir=$T/a_file/logs: cannot create the folder" --log_dir="$T/a_file/logs" "$T/marker"
check "--log_dir=$T/a_file: is not a folder" --log_dir="$T/a_file" "$T/marker"
check "--event_log=$T: cannot append to the file \(Is a directory\)" --event_log="$T" "$T/marker"
check "--event_log=$T/none/events.jsonl: cannot append" --event_log="$T/none/events.jsonl" "$T/marker"
TMPDIR="$T/none" check "TMPDIR=$T/none: cannot create a folder there" "$T/marker"

# The same through PET_* variables and SLURM's environment.
PET_NNODES=$digits check "PET_NNODES=9{80}\.\.\.: expected" "$T/marker"
PET_SHUTDOWN_TIMEOUT=inf check "PET_SHUTDOWN_TIMEOUT=inf: expected" "$T/marker"
PET_REDIRECTS=$long_list check "PET_REDIRECTS=(0:1,){20}" "$T/marker"
SLURM_JOB_ID=7 SLURM_JOB_NODELIST="node[1-99999999999]" \
  check "SLURM_JOB_NODELIST: invalid hostlist \"node\[1-99999999999\]\": range" "$T/marker"
SLURM_JOB_ID=7 SLURM_JOB_NODELIST="$(letters n)" \
  check "SLURM_JOB_NODELIST: invalid hostlist \"n{80}\.\.\.\": host \"n{80}\.\.\.\" is longer than 255" "$T/marker"
SLURM_JOB_ID=$digits check "SLURM_JOB_ID=\"9{80}\.\.\.\" is not a SLURM id" "$T/marker"
ok "hostile command lines, PET_* values, --config files, paths and SLURM variables: one short line, exit 64"

# --rdzv_id is never a path: its '/' and '..' stay inside the folder name ddprun makes.
mkdir "$T/tmp"
TMPDIR="$T/tmp" run_ddprun rdzv_id --rdzv_id=../../a/b --redirects=3 "$T/marker"
expect_eq "$RC" 0 "exit code with --rdzv_id=../../a/b"
[[ -e "$T/started" ]] || fail "the worker did not run with --rdzv_id=../../a/b"
rm -f "$T/started"
made=$(ls "$T/tmp")
[[ "$made" == ddprun-logs-.._.._a_b-* && ! -e "$T/a" ]] || fail "--rdzv_id=../../a/b made: $made"
ok "--rdzv_id=../../a/b names a folder inside TMPDIR ($made)"

# A long grace period is long, not zero: 1e10 used to wrap around and SIGKILL at once.
worker graceful <<'SH'
#!/bin/bash
if [ "$RANK" = 1 ]; then
  while [ ! -e "$T/ready" ]; do sleep 0.05; done
  exit 3
fi
trap 'sleep 0.5; touch "$T/term_handled"; exit 0' TERM
touch "$T/ready"
while true; do sleep 0.05; done
SH
run_ddprun graceful --nproc_per_node=2 --shutdown_timeout=1e9 "$T/graceful"
expect_eq "$RC" 3 "exit code when rank 1 fails (rank 0 stopped with --shutdown_timeout=1e9)"
[[ -e "$T/term_handled" ]] || fail "rank 0 was killed before its SIGTERM handler finished: $(cat "$T/graceful.err")"
ok "--shutdown_timeout=1e9: the stopped worker gets SIGTERM and finishes its handler"

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
