#!/usr/bin/env bash
# No worker or grandchild outlives ddprun, even when ddprun is SIGKILLed.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

worker parent <<'SH'
#!/bin/bash
bash -c "exec -a $T/grandchild sleep 300" &
# A grandchild that leaves its parent: it is reparented, but stays in the worker's group.
bash -c "bash -c 'exec -a $T/orphan sleep 300' & exit 0"
touch "$T/ready.$RANK"
exec -a "$T/worker" sleep 300
SH
all_ready() { [[ -f "$T/ready.0" && -f "$T/ready.1" && -f "$T/ready.2" ]]; }
"$DDPRUN" --nproc_per_node=3 "$T/parent" >"$T/out" 2>"$T/err" &
pid=$!
wait_for 30 all_ready
# A worker touches its ready file once it has started the orphan's shell, which may not have
# exec'd (renamed itself) yet on a loaded machine: wait for the three.
# (The snapshot first: a grep running beside ps would count itself.)
orphans_running() {
  local running
  running=$(leftovers)
  [[ $(grep -c -- "$T/orphan 300" <<<"$running") == 3 ]]
}
wait_for 10 orphans_running
# The guard names itself, not the script: pgrep -f "$T" does not see it, so it is looked for by name.
guard_of() { pgrep -f "^ddprun: orphan guard of $1\$" >/dev/null; }
guard_of "$pid" || fail "no process named 'ddprun: orphan guard of $pid'"
start=$(date +%s.%N)
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
wait_for 10 no_leftovers
guard_gone() { ! guard_of "$1"; }
wait_for 10 guard_gone "$pid"
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" "BEGIN { printf \"%.3f\", e - s }")
ok "ddprun SIGKILLed: workers and grandchildren gone after ${elapsed}s"

# A successful worker's leftover child is cleaned up at the end of the job too.
worker leaves_child <<'SH'
#!/bin/bash
bash -c "exec -a $T/left-behind sleep 300" &
exit 0
SH
"$DDPRUN" "$T/leaves_child"
wait_for 10 no_leftovers
ok "children left by a successful worker are stopped"

# Escapes from the worker's process group: a child in its own session (setsid) and a double-forked
# daemon, after each kind of end, with ddprun's cgroup and with the subreaper fallback.
worker escapes <<'SH'
#!/bin/bash
if [[ $TORCHELASTIC_RESTART_COUNT != 0 ]]; then  # a restart: what the first round left behind
  pgrep -fc -- "$T/(own-session|daemon)" > "$T/at_restart.$RANK" || true
  exit 0
fi
setsid bash -c "touch $T/session.$RANK; exec -a $T/own-session sleep 300" &
( (touch "$T/daemon.$RANK"; exec -a "$T/daemon" sleep 300) & )
for _ in $(seq 100); do [[ -f $T/session.$RANK && -f $T/daemon.$RANK ]] && break; sleep 0.05; done
touch "$T/escaped.$RANK"
# Both ranks' escapes exist before either ends: a failing rank stops the other, which on a
# loaded machine may not have made its own yet (a rank waited 0.2 s before: a timeout, once).
until [[ -f $T/escaped.0 && -f $T/escaped.1 ]]; do sleep 0.05; done
case "$HOW" in
  exit) exit 0 ;;
  fail) exit 3 ;;
  *) exec -a "$T/worker" sleep 300 ;;
esac
SH
escaped_ready() { [[ -f "$T/escaped.0" && -f "$T/escaped.1" ]]; }
# This PID namespace, as ddprun names its cgroup: ddprun.<pid namespace>.<pid>.
pid_ns() { readlink /proc/self/ns/pid | tr -dc 0-9; }
cgroup_root=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
if [[ -n "$cgroup_root" ]] && mkdir "$cgroup_root$(sed -n 's/^0:://p' /proc/self/cgroup)/ddprun-test.$$" 2>/dev/null; then
  rmdir "$cgroup_root$(sed -n 's/^0:://p' /proc/self/cgroup)/ddprun-test.$$"
  modes=(cgroup fallback)
else
  modes=(fallback)
  echo "not run: the cgroup mode (no writable cgroup v2 hierarchy here)"
fi
for mode in "${modes[@]}"; do
  cg=1; [[ $mode == fallback ]] && cg=0
  # pkill: `pkill -KILL -f SCRIPT` kills ddprun and its workers at once but not the orphan
  # guard, whose command line names only itself, so the guard still stops the escapes.
  for how in exit fail term kill pkill; do
    [[ $mode == fallback && $how == *kill ]] && continue  # not promised without a cgroup (docs/guides/running.md)
    rm -f "$T"/escaped.* "$T"/session.* "$T"/daemon.*
    DDPRUN_CGROUP=$cg HOW=$how "$DDPRUN" --nproc_per_node=2 "$T/escapes" >"$T/esc.out" 2>"$T/esc.err" &
    pid=$!
    wait_for 30 escaped_ready
    [[ -f $T/session.0 && -f $T/daemon.0 && -f $T/session.1 && -f $T/daemon.1 ]] || fail "$mode, $how: the escapes did not start"
    case $how in
      term) kill -TERM "$pid" ;;
      kill) kill -KILL "$pid" ;;
      pkill) pkill -KILL -f -- "$T/escapes" ;;
    esac
    wait "$pid" 2>/dev/null || true
    wait_for 10 no_leftovers
    wait_for 10 guard_gone "$pid"
    # Its cgroup is gone too (removed by ddprun, or by the guard after a SIGKILL).
    [[ $mode == fallback ]] || wait_for 10 test ! -e "$cgroup_root$(sed -n 's/^0:://p' /proc/self/cgroup)/ddprun.$(pid_ns).$pid"
  done
  # The end of a round (a restart) stops them too, before the next round starts.
  rm -f "$T"/escaped.* "$T"/session.* "$T"/daemon.* "$T"/at_restart.*
  DDPRUN_CGROUP=$cg HOW=fail "$DDPRUN" --nproc_per_node=2 --max_restarts=1 "$T/escapes" >"$T/esc.out" 2>"$T/esc.err" \
    || fail "$mode: the restarted job failed"
  expect_eq "$(cat "$T/at_restart.0" "$T/at_restart.1" | tr '\n' ' ')" "0 0 " "$mode: escapes of the first round alive at the restart"
  if [[ $mode == cgroup ]]; then ends="exit, failure, SIGTERM, SIGKILL of ddprun, and pkill -KILL -f of the script"; else ends="exit, failure and SIGTERM"; fi
  ok "$mode: setsid children and double-forked daemons are gone after a round's end, and after $ends"
done

# A ddprun whose own cgroup was killed once (cgroup.kill) before it started: Linux 6.18 kills
# at birth a child that clone3 makes in a cgroup killed a different number of times than its
# parent's; ddprun sees its worker die before it ran and starts it the other way (fork, then
# into the cgroup through cgroup.procs), in every round.
if [[ " ${modes[*]} " == *" cgroup "* ]]; then
  killed="$cgroup_root$(sed -n 's/^0:://p' /proc/self/cgroup)/ddprun-test-killed.$$"
  mkdir "$killed"
  echo 1 >"$killed/cgroup.kill"
  worker in_round_cgroup <<'SH'
#!/bin/bash
grep -q "^0::.*/ddprun\.[0-9]*\.[0-9]*/round\.$((TORCHELASTIC_RESTART_COUNT + 1))\$" /proc/self/cgroup || exit 2
[[ $TORCHELASTIC_RESTART_COUNT == 1 ]] || exit 1
SH
  bash -c 'echo $$ >"$1/cgroup.procs" && exec "$2" --nproc_per_node=2 --max_restarts=1 "$3"' _ \
    "$killed" "$DDPRUN" "$T/in_round_cgroup" >"$T/out" 2>"$T/err" || { cat "$T/err" >&2; fail "ddprun in a killed cgroup"; }
  grep -q "exit code 1" "$T/err" || fail "the first round did not run in its round cgroup: $(cat "$T/err")"
  wait_for 10 rmdir "$killed"
  ok "ddprun in a cgroup killed before: every round's workers start in the round's cgroup"
fi

# ddprun and its guard both SIGKILLed (a kill of their whole process group): the workers die
# with ddprun (PR_SET_PDEATHSIG), their escapes stay in ddprun's cgroup; the next ddprun kills
# them and removes that cgroup. The guard goes first, so that it cannot clean up.
if [[ " ${modes[*]} " == *" cgroup "* ]]; then
  rm -f "$T"/escaped.* "$T"/session.* "$T"/daemon.*
  HOW=kill "$DDPRUN" --nproc_per_node=2 "$T/escapes" >"$T/esc.out" 2>"$T/esc.err" &
  pid=$!
  wait_for 30 escaped_ready
  guard=$(pgrep -f "^ddprun: orphan guard of $pid\$") || fail "no orphan guard of $pid"
  kill -KILL "$guard"
  wait_for 10 guard_gone "$pid"
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  stale="$cgroup_root$(sed -n 's/^0:://p' /proc/self/cgroup)/ddprun.$(pid_ns).$pid"
  [[ -d $stale ]] || fail "ddprun and its guard SIGKILLed left no cgroup $stale"
  escapes_alive() { [[ $(leftovers | grep -c -e "$T/own-session" -e "$T/daemon") -ge 2 ]]; }
  wait_for 10 escapes_alive || fail "the escapes did not outlive ddprun and its guard: nothing to clean"
  "$DDPRUN" /bin/true || fail "ddprun /bin/true"
  wait_for 10 no_leftovers
  wait_for 10 test ! -e "$stale"
  ok "ddprun and its guard SIGKILLed together: the next ddprun killed what was left in their cgroup and removed it"
fi

# SIGKILL at random moments of start-up: nothing is left, over many runs.
worker starting <<'SH'
#!/bin/bash
setsid bash -c "exec -a $T/early-session sleep 300" &
bash -c "exec -a $T/early-child sleep 300" &
exec -a "$T/worker" sleep 300
SH
mkdir "$T/tmp"
for i in $(seq 1 20); do
  TMPDIR=$T/tmp "$DDPRUN" --nproc_per_node=4 "$T/starting" >/dev/null 2>&1 &
  pid=$!
  sleep "0.0$(( RANDOM % 10 ))"
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  wait_for 10 no_leftovers
done
# A ddprun killed before its guard existed leaves its private folder; the next ddprun removes it.
touch "$T/tmp/ddprun.not-a-pid.keep"
mkdir "$T/tmp/ddprun-logs-kept-by-the-user"
TMPDIR=$T/tmp "$DDPRUN" /bin/true || fail "ddprun /bin/true"
left() { ls -A "$T/tmp" | grep -v -e '^ddprun.not-a-pid.keep$' -e '^ddprun-logs-kept-by-the-user$' || true; }
tmp_clean() { [[ -z "$(left)" ]]; }
wait_for 10 tmp_clean || { left >&2; exit 1; }
[[ -e "$T/tmp/ddprun.not-a-pid.keep" && -d "$T/tmp/ddprun-logs-kept-by-the-user" ]] || fail "a folder that is not a dead ddprun's private one was removed"
ok "20 SIGKILLs at random moments of start-up left no process behind, and no private folder after the next ddprun"
