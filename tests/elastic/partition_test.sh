#!/usr/bin/env bash
# A node cut off from its coordinator, then healed (issue 43), on hosts in network namespaces (root
# and nft; skipped without): h1 runs node a, h2 node b, h3 a hot spare (c), --nnodes=2
# --rdzv_conf spares=1. The coordinator is the TCP rendezvous that a hosts on h1 (BACKEND tcp), or
# an etcd member on h4 (BACKEND etcd, whose leader node then acts). Once a and b run round 1, b is
# cut off from the coordinator's host (the others still reach both) until the job has re-formed
# with c in b's place and b has exited; then the cut heals. split_brain_check.py reads every node's event log and its
# workers' own records. Each run prints when b noticed (its stop_requested: the fence), when the
# host counted it lost, when c started b's ranks, and how long before c's start b's last worker
# was gone. The test fails on any broken invariant: b's fence (elastic/src/core/fence.hpp) must
# have killed b's workers before the host could count b lost, however long they would take to end
# after SIGTERM.
#
# usage: partition_test.sh [RUNS [STOP_SECONDS [CUT [BACKEND]]]]: RUNS runs (1); b's workers take
# STOP_SECONDS (0) to end after SIGTERM, as a worker saving a checkpoint would (a's and c's end at
# once); CUT is both (the default), from_b (b's packets to h1 dropped, h1's to b pass), to_b, or
# several of them with commas (RUNS runs of each); or stop_b: b's ddprun stopped (SIGSTOP) instead,
# its workers running on, until the job re-formed (its orphan guard must fence for it; an observer
# records when each of b's workers was seen dead, since b's own log says so only once resumed);
# or stall_start_b: a's worker is killed, and b's ddprun is held (strace's delay on its first
# pipe2, the first worker's pipes) as it starts the next round's workers until past its fence: it
# must start none of them, though the rendezvous had let it start the round; or stall_fork_b: the
# same, but b is held as it forks its first worker, after it checked the deadline: the child must
# not exec (StartRequest::start_by), since the orphan guard's backstop fired meanwhile; or stopping_b: a's
# worker is killed, and b's ddprun is stopped (SIGSTOP) as soon as it begins to stop its workers on
# the coordinator's word, until the job re-formed: its workers end meanwhile (STOP_SECONDS after
# SIGTERM, or the orphan guard's SIGKILL), so that b, resumed past its fence, may hear of their end
# before its fence's timer: it must exit 69, fenced, all the same; BACKEND tcp (the default) or etcd.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/netfault.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"  # finish_within, show
runs=${1:-1} stop_seconds=${2:-0} cut_kinds=${3:-both} backend=${4:-tcp}
case $backend in
  tcp) coordinator=1 hosts=3 ;;
  etcd) coordinator=4 hosts=4
        command -v etcd >/dev/null || skip "needs etcd (scripts/install-deps.sh installs it)" ;;
  *) fail "BACKEND: tcp or etcd, not '$backend'" ;;
esac
for cut_kind in ${cut_kinds//,/ }; do
  [[ $cut_kind =~ ^(both|from_b|to_b|stop_b|stall_start_b|stall_fork_b|stopping_b)$ ]] \
    || fail "CUT: both, from_b, to_b, stop_b, stall_start_b, stall_fork_b or stopping_b, not '$cut_kind'"
  if [[ $cut_kind == stall_*_b ]]; then
    command -v strace > /dev/null || skip "$cut_kind needs strace (scripts/install-deps.sh installs it)"
  fi
done
cut() {
  case $cut_kind in
    both) nf_cut 2 $coordinator ;;
    from_b) nf_cut_oneway 2 $coordinator ;;
    to_b) nf_cut_oneway $coordinator 2 ;;
    stop_b) observe_gone; wait_for 60 test -e "$NF_RUN/observer.ready"; kill -STOP "$PID_b" ;;
    stall_start_b) stall_b 1 ;;
    stall_fork_b) stall_b 3 ;;
    stopping_b) observe_gone; wait_for 60 test -e "$NF_RUN/observer.ready"; kill_a_worker
                wait_for 30 has_event "$NF_RUN/b.events" stop_requested; kill -STOP "$PID_b" ;;
  esac
}
heal() {
  case $cut_kind in
    both) nf_uncut 2 $coordinator ;;
    from_b) nf_uncut_oneway 2 $coordinator ;;
    to_b) nf_uncut_oneway $coordinator 2 ;;
    stop_b|stopping_b) kill -CONT "$PID_b" ;;
    stall_*_b) kill "$STRACE" 2> /dev/null || true; wait "$STRACE" || true ;;
  esac
}

# stall_b N: b's ddprun is held, once a's worker failed, in its start of the next round's workers
# (after the rendezvous let it start them) for heartbeat_timeout + 1.5 s, at its Nth pipe2 from
# there: the first worker's stdout pipe (1), before it checks the fence's deadline, or the pipe
# that tells whether its exec worked (3), after, right before its fork (process/spawn.cpp). (Not
# at its first clone: that one came earlier, while it stopped the last round's workers.) Its fence
# passes and the coordinator counts it lost meanwhile.
stall_b() {
  strace -qq -o /dev/null -p "$PID_b" -e trace=pipe2 \
    -e inject=pipe2:delay_enter=$((heartbeat_timeout * 1000000 + 1500000)):when="$1" &
  STRACE=$!
  wait_for 30 traced "$PID_b"
  kill_a_worker
}
kill_a_worker() {
  kill -KILL "$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["pid"])' "$NF_RUN/rec.a")"
}
traced() { [[ $(awk '/^TracerPid:/ {print $2}' "/proc/$1/status") != 0 ]]; }

# observe_gone: in the background, a "gone" record for each of b's workers at the moment it ends
# (worker_observer.py); ends once $NF_RUN/observed exists and all are gone.
observe_gone() {
  python3 "$DDPRUN_TESTS_DIR/elastic/worker_observer.py" "$NF_RUN" "$NF_RUN/observed" b &
  OBSERVER=$!
}
netfault_up $hosts
[[ $backend != etcd ]] || nf_etcd 4
heartbeat_timeout=${PARTITION_HEARTBEAT_TIMEOUT:-3}  # the documentation's figures at the default: 5

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
  local port rdzv; port=$(free_tcp_port)
  rdzv=(--rdzv_backend=c10d --rdzv_endpoint="h1:$port")
  [[ $backend == etcd ]] && rdzv=(--rdzv_backend=etcd --rdzv_endpoint="$NF_ETCD")
  local job=(--nnodes=2 --nproc_per_node=2 "${rdzv[@]}" --rdzv_id="part$1"
             --rdzv_conf="spares=1,heartbeat_timeout=$heartbeat_timeout,join_timeout=60" --shutdown_timeout=30
             --max_restarts=3)
  NF_NODE=a nf_on 1 a "${job[@]}" --event_log="$NF_RUN/a.events" "$T/life"
  NF_NODE=b NF_STOP_SECONDS=$stop_seconds nf_on 2 b "${job[@]}" --event_log="$NF_RUN/b.events" "$T/life"
  wait_for 60 started 4
  NF_NODE=c nf_on 3 c "${job[@]}" --event_log="$NF_RUN/c.events" "$T/life"
  wait_for 60 has_event "$NF_RUN/c.events" spare

  touch "$NF_RUN/cut"
  local cut; cut=$(date +%s.%N)
  cut
  wait_for 60 has_event "$NF_RUN/c.events" round_started
  heal
  finish_within 60 b
  expect_eq "$RC_b" 69 "b, cut off from the coordinator ($(show b))"
  expect_in "$T/b.err" "this node's workers were killed first \\(fenced\\)"
  if [[ $cut_kind == stop_b || $cut_kind == stopping_b ]]; then
    touch "$NF_RUN/observed"
    local observed=0; wait "$OBSERVER" || observed=$?
    [[ $observed == 0 ]] || fail "run $1: the worker observer ended $observed (workers it never saw end)"
  fi
  touch "$NF_RUN/release"
  finish_within 60 a; finish_within 60 c
  expect_eq "$RC_a $RC_c" "0 0" "a and c, the job re-formed without b ($(show a c))"
  if [[ $cut_kind == stopping_b ]]; then  # b was lost while the round stopped on a's failure
    expect_in "$T/a.err" "failed: killed by SIGKILL"
  else
    expect_in "$T/a.err" "was lost|lease in etcd expired"
  fi
  wait_for 30 no_leftovers
  [[ -n ${PARTITION_KEEP:-} ]] && cp "$T/a.err" "$PARTITION_KEEP.$1.a.err" && cp "$T/b.err" "$PARTITION_KEEP.$1.b.err"

  local check=ok
  if ! python3 "$DDPRUN_TESTS_DIR/elastic/split_brain_check.py" --expect-success \
    --node a "$NF_RUN/a.events" "$NF_RUN/rec.a" --node b "$NF_RUN/b.events" "$NF_RUN/rec.b" \
    --node c "$NF_RUN/c.events" "$NF_RUN/rec.c" > "$NF_RUN/check"; then
    cat "$NF_RUN/check"
    fail "run $1: the checker found a broken invariant"
  fi
  if [[ $cut_kind == stall_*_b ]]; then
    # b's workers of round 1 ended on the restart's SIGTERM; none of the next round's started.
    expect_in "$T/b.err" "ran past its fence's deadline .*: it started none of its 2"
    [[ $(grep -c '"restart":[1-9]' "$NF_RUN/rec.b") == 0 ]] \
      || fail "run $1: b started workers of the next round past its fence: $(grep '"start"' "$NF_RUN/rec.b")"
  elif [[ $cut_kind != stopping_b ]]; then  # stopping_b: the coordinator's stop came first
    [[ $(grep -c '"end"' "$NF_RUN/rec.b") == 0 ]] || fail "run $1: a worker of b ran its SIGTERM handler: fenced workers get SIGKILL"
  fi
  python3 - "$NF_RUN" "$cut" "$check" >> "$T/figures" <<'PY'
import json, sys
run, cut, check = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def events(node):
    return [json.loads(l) for l in open("%s/%s.events" % (run, node))]
a, b, c = events("a"), events("b"), events("c")
b_stop = min(e["time"] for e in b if e["event"] in ("stop_requested", "exit"))
# Seen dead by the observer (stop_b: b's ddprun logs their exits only once resumed), else logged.
gone = [json.loads(l)["real"] for l in open("%s/rec.b" % run) if '"gone"' in l]
b_gone = max(gone) if gone else max(e["time"] for e in b if e["event"] == "worker_exited")
b_exit = next(e["time"] for e in b if e["event"] == "exit")
# stopping_b: a's own worker's failure stopped a, not b's loss (nan).
a_lost = next((e["time"] for e in a if e["event"] == "stop_requested"), float("nan"))
c_start = min(e["time"] for e in c if e["event"] == "worker_started")
print("%s %.3f %.3f %.3f %.3f %.3f %.3f" % (check, b_stop - cut, b_gone - cut, b_exit - cut,
                                           a_lost - cut, c_start - cut, b_gone - c_start))
PY
}

for cut_kind in ${cut_kinds//,/ }; do
  : > "$T/figures"
  for n in $(seq 1 "$runs"); do one_run "$cut_kind-$n"; done
  echo "$backend: cut ($cut_kind) at 0 s (heartbeat_timeout=$heartbeat_timeout, b's workers end ${stop_seconds} s after SIGTERM); seconds after it:"
  echo "checker  b_fenced  b_workers_gone  b_exit_69  host_lost_b  c_started_b_ranks  window(b_gone-c_start)"
  cat "$T/figures"
  for n in $(seq 1 "$runs"); do cat "$T/run.$cut_kind-$n/check"; done
done
ok "$backend: $runs runs of each cut ($cut_kinds): b fenced its workers and exited 69, the job re-formed with the spare and ended 0, healed"
ok "no rank held by two live workers in any run"
