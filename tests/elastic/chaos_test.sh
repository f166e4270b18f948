#!/usr/bin/env bash
# A randomised schedule of network faults and process faults against a 4-node elastic job
# (issue 43), on hosts in network namespaces (root and nft; skipped without), then the
# split-brain checker over every node's history.
#
# usage: chaos_test.sh [BACKEND [SECONDS [SEED]]]: BACKEND tcp (node a on h1 hosts the rendezvous;
# the default) or etcd (one member on h5); faults for SECONDS (60); SEED (default: drawn, and
# printed) makes the schedule: the same seed gives the same faults in the same order, to the same
# nodes, for the same times (what the job does in between may differ). scripts/chaos.sh runs it
# for as long as asked.
#
# The job: nodes a, b, c, d on h1..h4, --nnodes=2:4, 2 workers each, a restart budget that does
# not run out. Each step picks a node among b, c, d and one fault, holds it 1-6 s, heals it, and
# waits until the job runs again (at least 2 nodes' workers alive): a cut between the node and the
# coordinator's host (both ways, or one way), the node's link down, 5-30 % loss, a flapping link,
# 50-500 ms of delay with a jitter of a quarter of it, 5-30 % of packets duplicated, 25 % of
# packets overtaking the others by 50-500 ms, a worker SIGKILLed, a worker SIGSTOPped, the node's
# ddprun SIGSTOPped, the node's ddprun SIGKILLed. A node whose ddprun ended (fenced, lost, killed) is started again as a scheduler
# would, as a new incarnation (b_2, b_3, ...: each its own event log and records). At the end every
# fault is healed and the workers are released: the job must end 0 on every node still in it, and
# the checker must find no rank held by two live workers at any moment, every round's sizes its
# members', every rank's final record, every line the workers printed in the output of each
# launcher that ended by itself (not SIGKILLed), and nothing left behind.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/netfault.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"  # finish_within, show
backend=${1:-tcp} duration=${2:-60} seed=${3:-$((RANDOM * 32768 + RANDOM))}
echo "chaos: backend $backend, $duration s of faults, seed $seed (again: $0 $backend $duration $seed)"
case $backend in
  tcp) coordinator=1 hosts=4 ;;
  etcd) coordinator=5 hosts=5
        command -v etcd >/dev/null || skip "needs etcd (scripts/install-deps.sh installs it)" ;;
  *) fail "BACKEND: tcp or etcd, not '$backend'" ;;
esac
RANDOM=$seed
# keep: with CHAOS_KEEP=DIR, the run's folder is copied there (on a failure, before it is removed).
keep() { [[ -z ${CHAOS_KEEP:-} ]] || cp -r "$T" "$CHAOS_KEEP"; }
netfault_up $hosts
export RUN=$T/run
mkdir -p "$RUN"

if [[ $backend == etcd ]]; then
  nf_etcd 5
  rdzv=(--rdzv_backend=etcd --rdzv_endpoint="$NF_ETCD")
else
  rdzv=(--rdzv_backend=c10d --rdzv_endpoint="h1:$(free_tcp_port)")
fi
job=(--nnodes=2:4 --nproc_per_node=2 "${rdzv[@]}" --rdzv_id=chaos --max_restarts=100000 --crash_loop_limit=0
     --restart_backoff_max=0 --rdzv_conf=heartbeat_timeout=3,join_timeout=120,last_call_timeout=1 --shutdown_timeout=10)

# The worker: "start", then runs until $RUN/release ("done", exit 0) or SIGTERM ("end", 143),
# printing a numbered line every 0.1 s, each also in $RUN/printed.NODE once it was written.
worker life <<'SH'
#!/bin/sh
rec() {
  printf '{"what":"%s","rank":%s,"pid":%s,"restart":%s,"real":%s,"mono":%s}\n' "$1" "$RANK" $$ \
    "$TORCHELASTIC_RESTART_COUNT" "$(date +%s.%N)" "$(cut -d' ' -f1 /proc/uptime)" >> "$RUN/rec.$NF_NODE"
}
rec start
trap 'kill "$nap" 2>/dev/null; rec end; exit 143' TERM
i=0
while [ ! -e "$RUN/release" ]; do
  i=$((i + 1))
  echo "tick $NF_NODE $$ $i" && echo "tick $NF_NODE $$ $i" >> "$RUN/printed.$NF_NODE"
  sleep 0.1 & nap=$!; wait "$nap"
done
rec done
SH

declare -A host=([a]=1 [b]=2 [c]=3 [d]=4) incarnation=()
# start_node X: a new incarnation of node X (X_N) on its host; its pid in PID_X.
start_node() {
  local n=$(( ${incarnation[$1]:-0} + 1 ))
  incarnation[$1]=$n
  NF_NODE=$1_$n nf_on "${host[$1]}" "$1_$n" "${job[@]}" --event_log="$RUN/$1_$n.events" "$T/life"
  eval "PID_$1=\$PID_$1_$n"
}
running() { local pid; pid=$(eval echo "\$PID_$1"); kill -0 "$pid" 2>/dev/null && [[ $(ps -o stat= -p "$pid") != Z* ]]; }
# The job runs: at least 2 nodes' workers (4) alive and not stopped.
live_workers() { ps -eo stat=,args= | awk -v w="$T/life" '$0 ~ w && $1 !~ /^[ZT]/' | wc -l; }
job_runs() { (( $(live_workers) >= 4 )); }
# A worker of node X's current incarnation (a child of its ddprun), or nothing.
some_worker() { pgrep -P "$(eval echo "\$PID_$1")" -f "$T/life" | head -n 1; }
# ended_as X: node X's incarnation has ended: its exit status in RC_X and in $RUN/exits.
ended_as() { finish "$1"; echo "$1_${incarnation[$1]} $(eval echo "\$RC_$1")" >> "$RUN/exits"; }

# Every worker's death seen from outside (worker_observer.py): a SIGKILLed worker writes no record,
# and a ddprun stopped or killed logs it late or not at all.
python3 "$DDPRUN_TESTS_DIR/elastic/worker_observer.py" "$RUN" "$RUN/observed" &
observer=$!
wait_for 60 test -e "$RUN/observer.ready"
for x in a b c d; do start_node $x; done
wait_for 120 job_runs

faults=(cut cut_from cut_to isolate loss flap kill_worker stop_worker stop_ddprun kill_ddprun delay duplicate reorder)
nf_delay_available || skip "the delay faults need iptables (scripts/install-deps.sh installs it) and nfnetlink_queue"
declare -A count=()
step=0 end_at=$((SECONDS + duration))
while (( SECONDS < end_at )); do
  step=$((step + 1))
  # Drawn here, never in a $(...): a subshell draws from a RANDOM of its own (bash reseeds it).
  targets=(b c d) x=${targets[$((RANDOM % 3))]}
  fault=${faults[$((RANDOM % ${#faults[@]}))]}
  hold=$((1 + RANDOM % 6)) pct=$((5 + RANDOM % 26)) ms=$((50 + RANDOM % 451))
  h=${host[$x]} me=${x}_${incarnation[$x]}
  count[$fault]=$(( ${count[$fault]:-0} + 1 ))
  echo "step $step at $(date +%s.%N): $fault $me for $hold s$(case $fault in loss|duplicate) echo " ($pct %)" ;; delay|reorder) echo " ($ms ms)" ;; esac)"
  case $fault in
    cut) nf_cut "$h" $coordinator; sleep "$hold"; nf_uncut "$h" $coordinator ;;
    cut_from) nf_cut_oneway "$h" $coordinator; sleep "$hold"; nf_uncut_oneway "$h" $coordinator ;;
    cut_to) nf_cut_oneway $coordinator "$h"; sleep "$hold"; nf_uncut_oneway $coordinator "$h" ;;
    isolate) nf_isolate "$h"; sleep "$hold"; nf_unisolate "$h" ;;
    loss) nf_loss "$h" "$pct"; sleep "$hold"; nf_unloss "$h" ;;
    flap) nf_flap "$h" 0.5 1; sleep "$hold"; nf_unflap "$h" ;;
    delay) nf_delay "$h" "$ms" $((ms / 4)); sleep "$hold"; nf_undelay "$h" ;;
    duplicate) nf_duplicate "$h" "$pct"; sleep "$hold"; nf_unduplicate "$h" ;;
    reorder) nf_reorder "$h" 25 "$ms"; sleep "$hold"; nf_unreorder "$h" ;;
    kill_worker) w=$(some_worker "$x" || true); [[ -z $w ]] || kill -KILL "$w" 2>/dev/null || true ;;
    stop_worker)
      w=$(some_worker "$x" || true)
      if [[ -n $w ]]; then kill -STOP "$w" 2>/dev/null || true; sleep "$hold"; kill -CONT "$w" 2>/dev/null || true; fi ;;
    stop_ddprun)
      p=$(eval echo "\$PID_$x"); kill -STOP "$p" 2>/dev/null || true; sleep "$hold"; kill -CONT "$p" 2>/dev/null || true ;;
    kill_ddprun) kill -KILL "$(eval echo "\$PID_$x")" 2>/dev/null || true ;;
  esac
  running a || { show a_1 b_${incarnation[b]} c_${incarnation[c]} d_${incarnation[d]}; keep; fail "step $step: node a ended during the run"; }
  # A node whose ddprun ended is started again, as a scheduler would; then the job must run again.
  for n in b c d; do
    if ! running $n; then ended_as $n; echo "  ${n}_${incarnation[$n]} ended $(eval echo "\$RC_$n"); started again"; start_node $n; fi
  done
  wait_for 180 job_runs
done

echo "faults: $(for f in "${faults[@]}"; do printf '%s %s, ' "$f" "${count[$f]:-0}"; done)"
for n in b c d; do running $n || { ended_as $n; start_node $n; }; done
wait_for 180 job_runs
touch "$RUN/release"
ended() { ! running "$1"; }
# diagnose X: what node X's ddprun is doing, for a node that does not end: its state, its
# children's, its threads' stacks (eu-stack), the last records of its event log.
diagnose() {
  local pid; pid=$(eval echo "\$PID_$1")
  echo "--- ${1}_${incarnation[$1]} (pid $pid): $(grep -E '^State' "/proc/$pid/status" 2>/dev/null)"
  ps -o pid=,stat=,wchan:24=,args= --ppid "$pid" 2>/dev/null | cut -c1-160
  command -v eu-stack >/dev/null && eu-stack -p "$pid" 2>&1 | cut -c1-200 | head -120
  tail -n 15 "$RUN/${1}_${incarnation[$1]}.events" 2>/dev/null | cut -c1-300
}
for n in a b c d; do
  poll_until 120 ended $n || { show "${n}_${incarnation[$n]}"; diagnose $n; keep; fail "node ${n}_${incarnation[$n]} did not end within 120 s of the release"; }
  ended_as $n
done
# The node of the last fault may lose the rendezvous only now (a ddprun stopped past its fence
# or its lease runs again, a lease expires): it leaves the job (69), which ends 0 without it; the
# checker proves the last round's ranks all ended with their final record.
in_job=0
for n in a b c d; do
  rc=$(eval echo "\$RC_$n") me=${n}_${incarnation[$n]}
  if [[ $rc == 69 && $n == "$x" ]]; then
    echo "  $me lost the rendezvous after the release (the last fault, $fault, was its): it left the job"
    continue
  fi
  [[ $rc == 0 ]] || fail "node $me exited $rc after the release ($(show "$me"))"
  in_job=$((in_job + 1))
done
(( in_job >= 2 )) || fail "only $in_job nodes ended the job (--nnodes=2:4)"
touch "$RUN/observed"
wait "$observer" || fail "the observer saw workers that never died"
wait_for 60 no_leftovers

args=()
incarnations=0
for n in a b c d; do
  for i in $(seq 1 "${incarnation[$n]}"); do
    touch "$RUN/rec.${n}_$i" "$RUN/${n}_$i.events"  # an incarnation that never ran has neither
    args+=(--node "${n}_$i" "$RUN/${n}_$i.events" "$RUN/rec.${n}_$i")
    incarnations=$((incarnations + 1))
  done
done
# No output lost: a launcher the schedule SIGKILLed (137) takes what its pipes held with it.
while read -r me rc; do
  touch "$RUN/printed.$me"
  [[ $rc == 137 ]] || args+=(--output "$me" "$T/$me.out" "$RUN/printed.$me")
done < "$RUN/exits"
python3 "$DDPRUN_TESTS_DIR/elastic/split_brain_check.py" --expect-success "${args[@]}" ||
  { keep; fail "seed $seed: the checker found a broken invariant (again: $0 $backend $duration $seed)"; }
ok "$backend, seed $seed: $step faults in $duration s, $incarnations node incarnations; the job ended 0 with every invariant held"
