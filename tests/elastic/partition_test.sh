#!/usr/bin/env bash
# A node cut off from the TCP rendezvous host, then healed (issue 43), on 3 hosts in network
# namespaces (root and nft; skipped without): h1 hosts the rendezvous (node a), h2 runs node b,
# h3 a hot spare (c), --nnodes=2 --rdzv_conf spares=1. Once a and b run round 1, b is cut off
# from h1 both ways (h3 still reaches both) until the host has re-formed with c in b's place and b
# has exited; then the cut heals. split_brain_check.py reads every node's event log and its
# workers' own records. Each run prints when b noticed (its stop_requested: the fence), when the
# host counted it lost, when c started b's ranks, and how long before c's start b's last worker
# was gone. The test fails on any broken invariant: b's fence (elastic/src/core/fence.hpp) must
# have killed b's workers before the host could count b lost, however long they would take to end
# after SIGTERM.
#
# usage: partition_test.sh [RUNS [STOP_SECONDS [CUT]]]: RUNS runs (1); b's workers take
# STOP_SECONDS (0) to end after SIGTERM, as a worker saving a checkpoint would (a's and c's end at
# once); CUT is both (the default), from_b (b's packets to h1 dropped, h1's to b pass), to_b, or
# several of them with commas (RUNS runs of each).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/netfault.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"  # finish_within, show
runs=${1:-1} stop_seconds=${2:-0} cut_kinds=${3:-both}
for cut_kind in ${cut_kinds//,/ }; do
  [[ $cut_kind =~ ^(both|from_b|to_b)$ ]] || fail "CUT: both, from_b or to_b, not '$cut_kind'"
done
cut() {
  case $cut_kind in
    both) nf_cut 2 1 ;;
    from_b) nf_cut_oneway 2 1 ;;
    to_b) nf_cut_oneway 1 2 ;;
  esac
}
heal() {
  case $cut_kind in
    both) nf_uncut 2 1 ;;
    from_b) nf_uncut_oneway 2 1 ;;
    to_b) nf_uncut_oneway 1 2 ;;
  esac
}
netfault_up 3
heartbeat_timeout=3

# The worker: "start" when it begins; before the cut it runs until stopped ("end" once SIGTERM
# came and STOP_SECONDS passed); after it, it runs until $T/release and ends with "done".
worker life <<'SH'
#!/bin/sh
rec() {
  printf '{"what":"%s","rank":%s,"pid":%s,"restart":%s,"real":%s,"mono":%s}\n' "$1" "$RANK" $$ \
    "$TORCHELASTIC_RESTART_COUNT" "$(date +%s.%N)" "$(cut -d' ' -f1 /proc/uptime)" >> "$NF_RUN/rec.$NF_NODE"
}
rec start
stop() { kill "$nap" 2>/dev/null; sleep "$NF_STOP_SECONDS"; rec end; exit 143; }
nap=
trap stop TERM
if [ ! -e "$NF_RUN/cut" ]; then
  sleep 600 & nap=$!
  wait "$nap"
  exit 1
fi
while [ ! -e "$NF_RUN/release" ]; do sleep 0.05 & nap=$!; wait "$nap"; done
rec done
SH

# event_time LOG EVENT [JSON_FILTER]: the time of the first EVENT in LOG for which the Python
# expression FILTER (of e) holds; nothing when there is none.
event_time() {
  python3 - "$@" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == sys.argv[2] and eval(sys.argv[3] if len(sys.argv) > 3 else "True", {"e": e}):
        print("%.3f" % e["time"])
        break
PY
}
has_event() { [[ -n $(event_time "$@" 2>/dev/null) ]]; }
started() { [[ $(cat "$NF_RUN"/rec.* 2>/dev/null | grep -c '"start"') -ge $1 ]]; }

# one_run N: a run of the scenario in $T/run.N; its figures appended to $T/figures.
one_run() {
  export NF_RUN=$T/run.$1 NF_STOP_SECONDS=0
  mkdir -p "$NF_RUN"
  local port; port=$(free_tcp_port)
  local job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="h1:$port" --rdzv_id="part$1"
             --rdzv_conf="spares=1,heartbeat_timeout=$heartbeat_timeout,join_timeout=60" --shutdown_timeout=30)
  NF_NODE=a nf_on 1 a "${job[@]}" --event_log="$NF_RUN/a.events" "$T/life"
  NF_NODE=b NF_STOP_SECONDS=$stop_seconds nf_on 2 b "${job[@]}" --event_log="$NF_RUN/b.events" "$T/life"
  wait_for 60 started 4
  NF_NODE=c nf_on 3 c "${job[@]}" --event_log="$NF_RUN/c.events" "$T/life"
  wait_for 60 has_event "$NF_RUN/c.events" spare

  touch "$NF_RUN/cut"
  local cut; cut=$(date +%s.%N)
  cut
  finish_within 60 b
  expect_eq "$RC_b" 69 "b, cut off from the host ($(show b))"
  expect_in "$T/b.err" "lost the rendezvous"
  wait_for 60 has_event "$NF_RUN/c.events" round_started
  heal
  touch "$NF_RUN/release"
  finish_within 60 a; finish_within 60 c
  expect_eq "$RC_a $RC_c" "0 0" "a and c, the job re-formed without b ($(show a c))"
  expect_in "$T/a.err" "was lost"
  wait_for 30 no_leftovers

  local check=ok
  if ! python3 "$DDPRUN_TESTS_DIR/elastic/split_brain_check.py" --expect-success \
    --node a "$NF_RUN/a.events" "$NF_RUN/rec.a" --node b "$NF_RUN/b.events" "$NF_RUN/rec.b" \
    --node c "$NF_RUN/c.events" "$NF_RUN/rec.c" > "$NF_RUN/check"; then
    cat "$NF_RUN/check"
    fail "run $1: the checker found a broken invariant"
  fi
  expect_in "$T/b.err" "fenced"
  [[ $(cat "$NF_RUN"/rec.b | grep -c '"end"') == 0 ]] || fail "run $1: a worker of b ran its SIGTERM handler: fenced workers get SIGKILL" 
  python3 - "$NF_RUN" "$cut" "$check" >> "$T/figures" <<'PY'
import json, sys
run, cut, check = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def events(node):
    return [json.loads(l) for l in open("%s/%s.events" % (run, node))]
a, b, c = events("a"), events("b"), events("c")
b_stop = min(e["time"] for e in b if e["event"] in ("stop_requested", "exit"))
b_gone = max(e["time"] for e in b if e["event"] == "worker_exited")
b_exit = next(e["time"] for e in b if e["event"] == "exit")
a_lost = next(e["time"] for e in a if e["event"] == "stop_requested")
c_start = min(e["time"] for e in c if e["event"] == "worker_started")
print("%s %.3f %.3f %.3f %.3f %.3f %.3f" % (check, b_stop - cut, b_gone - cut, b_exit - cut,
                                           a_lost - cut, c_start - cut, b_gone - c_start))
PY
}

for cut_kind in ${cut_kinds//,/ }; do
  : > "$T/figures"
  for n in $(seq 1 "$runs"); do one_run "$cut_kind-$n"; done
  echo "cut ($cut_kind) at 0 s (heartbeat_timeout=$heartbeat_timeout, b's workers end ${stop_seconds} s after SIGTERM); seconds after it:"
  echo "checker  b_fenced  b_workers_gone  b_exit_69  host_lost_b  c_started_b_ranks  window(b_gone-c_start)"
  cat "$T/figures"
  for n in $(seq 1 "$runs"); do cat "$T/run.$cut_kind-$n/check"; done
done
ok "$runs runs of each cut ($cut_kinds): b fenced its workers and exited 69, the job re-formed with the spare and ended 0, healed"
ok "no rank held by two live workers in any run"
