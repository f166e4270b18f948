#!/usr/bin/env bash
# A worker for the tests of ddprun under SLURM. Records what the launcher gave it in
# $PROBE_DIR/attempt<TORCHELASTIC_RESTART_COUNT>/rank<RANK>.env (KEY=VALUE lines), then:
#   PROBE_HOLD=1        waits until every rank of this attempt has recorded, so that a crash
#                       finds the whole group running
#   PROBE_CRASH_RANK=R  rank R exits 3 in attempt 0 (after the hold); the others keep running
#                       until the launcher stops them
#   PROBE_WAIT_USR1=1   writes rank<RANK>.ready, then exits 0 once SIGUSR1 has arrived
#                       (each arrival appends a line to rank<RANK>.usr1)
# and writes rank<RANK>.done when it ends on its own. Every wait gives up with exit 1 after
# PROBE_TIMEOUT seconds (default 120).
set -euo pipefail
: "${PROBE_DIR:?}" "${RANK:?}" "${WORLD_SIZE:?}"
dir=$PROBE_DIR/attempt${TORCHELASTIC_RESTART_COUNT:-0}
me=$dir/rank$RANK
mkdir -p "$dir"
usr1=0
trap 'usr1=1; echo "$(date +%s.%N)" >> "$me.usr1"' USR1

{
  echo "HOST=$(hostname)"
  env | grep -E '^(RANK|LOCAL_RANK|GROUP_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_RUN_ID|TORCHELASTIC_RESTART_COUNT|SLURM_NODEID|SLURM_JOB_ID)=' | sort
} > "$me.env.$(hostname).$$"
mv "$me.env.$(hostname).$$" "$me.env"

deadline=$((SECONDS + ${PROBE_TIMEOUT:-120}))
# Sleeps a tenth of a second in a way a signal interrupts, so the trap runs at once.
nap() { sleep 0.1 & wait $! || true; }
give_up() { echo "rank $RANK: gave up waiting for $1" >&2; exit 1; }

if [[ ${PROBE_HOLD:-0} == 1 ]]; then
  until [[ $(compgen -G "$dir/rank*.env" | wc -l) -ge $WORLD_SIZE ]]; do
    ((SECONDS < deadline)) || give_up "all $WORLD_SIZE ranks"
    nap
  done
fi
if [[ ${PROBE_CRASH_RANK:-} == "$RANK" && ${TORCHELASTIC_RESTART_COUNT:-0} == 0 ]]; then
  echo "rank $RANK: crashing on purpose"
  exit 3
fi
if [[ -n ${PROBE_CRASH_RANK:-} && ${TORCHELASTIC_RESTART_COUNT:-0} == 0 ]]; then
  while :; do
    ((SECONDS < deadline)) || give_up "the launcher to stop this attempt"
    nap
  done
fi
if [[ ${PROBE_WAIT_USR1:-0} == 1 ]]; then
  touch "$me.ready"
  until ((usr1)); do
    ((SECONDS < deadline)) || give_up "SIGUSR1"
    nap
  done
fi
touch "$me.done"
