#!/usr/bin/env bash
# The goodput ledger (issue 58, item 1) against the test's own clock: workers with a scripted life
# (a load without progress, beats, a checkpoint committed to DDPRUN_SNAPSHOT_DIR, a SIGKILL at a
# known time) stamp what they do with the wall clock; the test stamps each ddprun's launch and
# exit. From the stamps alone it computes the time to start, the time to recover, the work redone
# and ETT% = (training - redone) / wall, and checks --result_file's goodput against them, on one
# node and on two (two ddprun on loopback, one TCP rendezvous).
#
# Tolerance: TOL seconds for each time and ETT_TOL percentage points for ETT%. What differs
# between the two clocks is ddprun's own latency (its start after the launch stamp, a beat or a
# commit read after the worker's stamp, its exit before the exit stamp, a failure elsewhere
# heard through the rendezvous): milliseconds alone, up to a few hundred on a loaded 2-core
# machine. The scripted times are 1 s and more, so a ledger that counted a load as training, a
# recovery as training or the wrong commit would be off by more than the tolerance.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"

TOL=0.6
ETT_TOL=8

# A rank's life. Attempt 0: loads 1.5 s (no progress), beats every 0.1 s; the committer commits
# 1 s after its first beat; the killer SIGKILLs itself 2.5 s after its first beat. Attempt 1:
# loads 1 s, beats for 2 s, exits 0. Stamps: first.ATTEMPT.NODE.LOCAL_RANK (just before the first
# beat), commit, killed, end.NODE.LOCAL_RANK.
worker life <<'SH'
#!/bin/bash
now() { date +%s.%N; }
a=$TORCHELASTIC_RESTART_COUNT
me=$NODE.$LOCAL_RANK
beat() { touch "$DDPRUN_HEARTBEAT_FILE"; }
if [ "$a" = 0 ]; then sleep 1.5; else sleep 1; fi
now > "$T/first.$a.$me"; beat
if [ "$a" = 0 ]; then
  for i in $(seq 1 25); do
    sleep 0.1; beat
    if [ "$i" = 10 ] && [ "$me" = "$COMMITTER" ] && [ "$COMMIT" = 1 ]; then
      echo step10 > "$DDPRUN_SNAPSHOT_DIR/ckpt.tmp" && mv "$DDPRUN_SNAPSHOT_DIR/ckpt.tmp" "$DDPRUN_SNAPSHOT_DIR/ckpt"
      now > "$T/commit"
    fi
  done
  if [ "$me" = "$KILLER" ]; then now > "$T/killed"; kill -9 $$; fi
  exec sleep 30  # the others wait, as ranks in a collective would, until ddprun stops them
fi
for i in $(seq 1 20); do sleep 0.1; beat; done
now > "$T/end.$me"
SH

# launch NAME ARGS...: ddprun as node NAME in the background (NODE=NAME for its workers), its
# launch and exit stamped in launch.NAME and exit.NAME, its exit code in rc.NAME.
launch() {
  local name=$1; shift
  date +%s.%N > "$T/launch.$name"
  ( rc=0; NODE=$name "$DDPRUN" "$@" >"$T/$name.out" 2>"$T/$name.err" || rc=$?
    date +%s.%N > "$T/exit.$name"; echo "$rc" > "$T/rc.$name" ) &
}
ended() { [[ -s "$T/rc.$1" ]]; }

# check NAME COMMIT: the ledger of node NAME (its result file) against the stamps of its own ranks
# and launch; COMMIT: 1 when a commit was made (work redone known), 0 when none (unknown, ETT% an
# upper bound).
check() {
  python3 - "$T" "$1" "$2" "$TOL" "$ETT_TOL" <<'PY'
import glob, json, sys
T, name, commit, tol, ett_tol = sys.argv[1], sys.argv[2], sys.argv[3] == "1", float(sys.argv[4]), float(sys.argv[5])
stamp = lambda path: float(open(path).read())
launch, exit_ = stamp(f"{T}/launch.{name}"), stamp(f"{T}/exit.{name}")
mine = lambda pattern: [stamp(p) for p in glob.glob(f"{T}/{pattern}")]
started0, started1 = max(mine(f"first.0.{name}.*")), max(mine(f"first.1.{name}.*"))
killed, ended = stamp(f"{T}/killed"), max(mine(f"end.{name}.*"))
# Training stops at the kill everywhere: the other ranks wait in their sleep from then on.
training = (killed - started0) + (ended - started1)
redone = killed - stamp(f"{T}/commit") if commit else 0.0
wall = exit_ - launch
measured = {"time_to_start": started0 - launch, "time_to_recover": started1 - killed,
            "work_redone": redone, "ett_percent": 100 * (training - redone) / wall}
g = json.load(open(f"{T}/{name}.json"))["goodput"]
reported = {"time_to_start": g["time_to_start"], "time_to_recover": g["failures"][0]["time_to_recover"],
            "work_redone": g["work_redone_seconds"], "ett_percent": g["ett_percent"]}
print(f"node {name}: measured " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items()))
print(f"node {name}: reported " + ", ".join(f"{k} {v}" for k, v in reported.items()))
bad = []
if len(g["failures"]) != 1: bad.append(f"{len(g['failures'])} failures, expected 1")
for key, limit in (("time_to_start", tol), ("time_to_recover", tol), ("ett_percent", ett_tol)):
    if abs(reported[key] - measured[key]) > limit: bad.append(f"{key} off by more than {limit}")
if commit:
    if reported["work_redone"] is None or abs(reported["work_redone"] - redone) > tol: bad.append(f"work_redone off by more than {tol}")
    if g["ett_upper_bound"]: bad.append("ETT% an upper bound with a commit")
else:
    if reported["work_redone"] is not None or not g["ett_upper_bound"]: bad.append("work redone not unknown without a commit")
# The four parts add up to the wall time, and ETT% = 100% - idleness% - failure%.
parts = g["starting_seconds"] + g["training_seconds"] + g["recovering_seconds"] + g["idle_seconds"]
if abs(parts - g["wall_seconds"]) > 1e-6: bad.append(f"parts {parts} != wall {g['wall_seconds']}")
ett = 100 - 100 * (g["starting_seconds"] + g["idle_seconds"]) / g["wall_seconds"] \
      - 100 * (g["recovering_seconds"] + g["work_redone_known_seconds"]) / g["wall_seconds"]
if abs(ett - g["ett_percent"]) > 1e-6: bad.append(f"ETT% {g['ett_percent']} is not 100 - idleness - failure ({ett})")
if bad: sys.exit(f"node {name}: " + "; ".join(bad))
PY
}

# 1. One node, two ranks: rank 1 killed, rank 0 committed a checkpoint 1.5 s before.
rm -f "$T"/first.* "$T"/end.* "$T"/killed "$T"/commit "$T"/rc.*
export COMMITTER=solo.0 KILLER=solo.1 COMMIT=1
launch solo --nproc_per_node=2 --max_restarts=1 --rdzv_id="goodput1-$$" \
  --result_file="$T/solo.json" --event_log="$T/solo.jsonl" "$T/life"
wait_for 60 ended solo
expect_eq "$(cat "$T/rc.solo")" 0 "one node: the job ends well ($(cat "$T/solo.err"))"
check solo 1 || { cat "$T/solo.err"; fail "one node: the ledger against the test's clock"; }
expect_in "$T/solo.err" "^ddprun: goodput [0-9.]+%: started in [0-9.]+ s, 1 failure \(1 killed\) cost [0-9.]+ s, [0-9.]+ s of work redone"
expect_eq "$(events "$T/solo.jsonl" goodput why | tr '\n' ' ')" "started recovered exit " "one node: goodput records"
ok "one node: time to start, time to recover, work redone, ETT% within ${TOL} s / ${ETT_TOL} points of the test's clock"

# 2. The same without a commit: work redone unknown, ETT% an upper bound.
rm -f "$T"/first.* "$T"/end.* "$T"/killed "$T"/commit "$T"/rc.*
export COMMITTER=solo.0 KILLER=solo.0 COMMIT=0
launch solo --nproc_per_node=1 --max_restarts=1 --rdzv_id="goodput2-$$" \
  --result_file="$T/solo.json" "$T/life"
wait_for 60 ended solo
expect_eq "$(cat "$T/rc.solo")" 0 "no commit: the job ends well ($(cat "$T/solo.err"))"
check solo 0 || { cat "$T/solo.err"; fail "no commit: the ledger against the test's clock"; }
expect_in "$T/solo.err" "^ddprun: goodput at most [0-9.]+%: .* work redone unknown \(no checkpoint committed to DDPRUN_SNAPSHOT_DIR\)"
ok "no commit: work redone unknown, ETT% an upper bound, the rest within tolerance"

# 3. Two nodes of two ranks on loopback: node b's local rank 1 is killed; node a sees the failure
# as the round's stop (another_node). Each node's ledger is checked against its own launch.
next_port
rm -f "$T"/first.* "$T"/end.* "$T"/killed "$T"/commit "$T"/rc.*
rdzv=(--nnodes=2 --nproc_per_node=2 --max_restarts=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port
      --rdzv_id="goodput3-$$")
export COMMITTER=a.0 KILLER=b.1 COMMIT=1
launch a "${rdzv[@]}" --local_addr=127.0.0.2 --result_file="$T/a.json" "$T/life"
launch b "${rdzv[@]}" --local_addr=127.0.0.3 --result_file="$T/b.json" "$T/life"
wait_for 90 ended a
wait_for 30 ended b
expect_eq "$(cat "$T/rc.a") $(cat "$T/rc.b")" "0 0" "two nodes: the job ends well ($(show a b))"
check a 1 || { show a b; fail "two nodes, node a: the ledger against the test's clock"; }
check b 1 || { show a b; fail "two nodes, node b: the ledger against the test's clock"; }
expect_eq "$(json_field "$T/a.json" '["goodput"]["failures"][0]["kind"]')" another_node "node a's failure"
expect_eq "$(json_field "$T/b.json" '["goodput"]["failures"][0]["kind"]')" killed "node b's failure"
expect_in "$T/a.err" "^ddprun: goodput [0-9.]+%: started in [0-9.]+ s, 1 failure \(1 on another node\)"
ok "two nodes: each node's ledger within ${TOL} s / ${ETT_TOL} points of the test's clock"
wait_for 10 no_leftovers
