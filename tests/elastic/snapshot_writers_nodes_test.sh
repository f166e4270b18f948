#!/usr/bin/env bash
# The checkpoint writers people use, unchanged but for their folder (DDPRUN_SNAPSHOT_DIR), resume
# after a node's SIGKILL, with a hot spare taking its place, from what they committed last (issue
# 57). For one WRITER of tests/launcher/snapshot_writers/ on one PYTHON (debian: /usr/bin/python3
# and its torch 1.13; venv: the torch 2.x venv of scripts/install-deps.sh --torch2), or for the
# C++ worker library's Checkpointer (train --snapshots):
#   snapshot_writers_nodes_test.sh WRITER debian|venv
#   snapshot_writers_nodes_test.sh checkpointer cpp
# The reference: the program uninterrupted on one node (--nproc_per_node=2, gloo, CPU); a Python
# writer runs 12 steps with a checkpoint every 4, train 3 epochs of 16 steps with a checkpoint
# after each. Then, on the TCP store (c10d) and on etcd: the same world of 2 as a job of two nodes
# of one worker each plus a hot spare, each node in a mount namespace of its own (nsnode: a
# private /tmp, /dev/shm, /run and /var/tmp), so that only ddprun's replication carries a file
# from one node's folder to another's. Every rank pauses at a known step (after step 9: probe.py;
# before step 40: train --pause-at-step); once both nodes' folders hold the same files (the last
# checkpoint copied across), one node's ddprun is SIGKILLed. Its workers must die with it
# (ddprun's guard), the spare take its place, and the next round's ranks (the survivor's and the
# spare's) resume from the last checkpoint (step 8; after epoch 2), every rank with the parameters
# the reference had there, bit for bit, and end with the reference's final parameters. c10d kills
# the node that is not the store's host, etcd the node of rank 0 (whose files the others then
# hold only by the replication).
# Skipped, saying so, without root and unshare, or where PYTHON lacks what the writer needs.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_TESTS_DIR/elastic/nodes.sh"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
writer=$1 which=$2
case $which in
  debian) python=/usr/bin/python3 ;;
  venv) python=$TORCH2_PYTHON ;;
  cpp) [[ $writer == checkpointer ]] || fail "usage: snapshot_writers_nodes_test.sh checkpointer cpp" ;;
  *) fail "usage: snapshot_writers_nodes_test.sh WRITER debian|venv, or checkpointer cpp" ;;
esac
case $writer in
  torch_save) needs=torch.distributed ;;
  dcp) needs=torch.distributed.checkpoint.state_dict ;;
  lightning_ckpt) needs=lightning ;;
  hf_trainer) needs=transformers ;;
  checkpointer) [[ $which == cpp ]] || fail "usage: snapshot_writers_nodes_test.sh checkpointer cpp" ;;
  *) fail "no writer $writer" ;;
esac
can_nsnode || skip "needs root and unshare -m: each node runs in a mount namespace of its own"
# One thread a worker in every run: the reference's ranks and the nodes' compute alike (ddprun
# sets it only for more than one worker a node), and the loaded machine is not overloaded.
export OMP_NUM_THREADS=1 DDPRUN_RDZV_SECRET=writers-nodes-secret
if [[ $which == cpp ]]; then
  [[ -n ${TRAIN:-} ]] || skip "no train program in this build (the worker library needs libtorch)"
  what="train --snapshots (the C++ Checkpointer)"
  program() { echo "$TRAIN" --epochs 3 --samples 1024 --val-samples 256 --snapshots --save-params "$T/$1.params"; }
  pause() { echo --pause-at-step 40 --pause-until "$T/go_on"; }
  paused_pattern="train: paused before step 40 on rank"
else
  "$python" -c "import $needs" 2>/dev/null \
    || skip "$python has no $needs (the $writer writer; scripts/install-deps.sh --torch2 installs the venv)"
  unset PYTHONPATH
  export PYTHON_EXEC=$python HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  what="$writer (torch $("$python" -c 'import torch; print(torch.__version__)'))"
  cp -r "$DDPRUN_TESTS_DIR/launcher/snapshot_writers" "$T/writers"
  program() { echo "$T/writers/$writer.py" 12 4; }
  pause() { :; }
  paused_pattern="RESULT rank=[01] paused_after_step=9 "
fi

# matches RANK FIELDS FILE...: the values of the RESULT lines of rank RANK in FILEs that start
# with FIELDS, without them, one a line. FIELDS ends a field, or ends with '=' to match any value.
matches() {
  local start="^\[rank$1\]: RESULT rank=$1 $2"
  [[ $2 == *= ]] || start+='\( \|$\)'
  shift 2
  sed -n "s/$start//p" "$@"
}
# one RANK FIELDS FILE...: as matches, where exactly one line is expected.
one() {
  local found
  found=$(matches "$@")
  [[ -n $found && $(wc -l <<<"$found") == 1 ]] || fail "$what: expected one RESULT line 'rank=$1 $2' in ${*:3}, found: '$found'"
  echo "$found"
}
# at RANK STEP FILE...: the parameters' digest after STEP.
at() { one "$1" "step=$2" "${@:3}" | sed -n 's/^checksum=//p'; }

read -r -a cmd <<<"$(program reference)"
run_ddprun reference --nproc_per_node=2 --rdzv_id="writers-nodes-$$" "${cmd[@]}"
[[ $RC == 0 ]] || { tail -30 "$T/reference.err" "$T/reference.out"; fail "$what: the reference run: exit $RC"; }
if [[ $which != cpp ]]; then
  reference8=$(at 0 8 "$T/reference.out")
  reference12=$(at 0 12 "$T/reference.out")
  expect_eq "$(at 1 8 "$T/reference.out")" "$reference8" "$what: the reference's ranks after step 8"
  expect_eq "$(at 1 12 "$T/reference.out")" "$reference12" "$what: the reference's ranks after step 12"
fi

# folder NODE: node NODE's snapshot folder, as the test sees it through its ddprun's root (in its
# own mount namespace, whose /dev/shm holds only this job's folder).
folder() { echo /proc/"$(pid "$1")"/root/dev/shm/ddprun-snapshots.*; }
# files NODE: every file of node NODE's folder (what ddprun is still receiving left out), a line
# each: its path and digest.
files() { (cd "$(folder "$1")" && find . -path ./.ddprun-incoming -prune -o -type f -print0 | sort -z | xargs -0r sha256sum); }
# replicated NODE NODE: both folders hold the same files, and some.
replicated() {
  local one two
  one=$(files "$1" 2>/dev/null) && two=$(files "$2" 2>/dev/null) && [[ -n $one && $one == "$two" ]]
}
# pid NODE: node NODE's ddprun.
pid() { eval echo "\$PID_$1"; }
# paused: both ranks stand at the pause.
paused() { [[ $(cat "${out[@]}" 2>/dev/null | grep -c "$paused_pattern") == 2 ]]; }
# Nothing of the job left but etcd, which the etcd run stops at its end.
no_job_left() { [[ -z "$(leftovers | awk '$3 !~ /(^|\/)etcd$/')" ]]; }

# scenario: the node case on the backend in RDZV (BACKEND names it, and its nodes: BACKEND_a,
# BACKEND_b and the spare BACKEND_s).
scenario() {
  local b=$BACKEND n victim survivor r starts resumed workers cmd
  rm -f "$T/go_on"
  # No --max_restarts: a node's loss is not a failure of the job's (Lightning's SIGTERM handler
  # raises as the survivor's worker is stopped; that worker's exit does not use up a restart).
  local job=(--nnodes=2 --nproc_per_node=1 "${RDZV[@]}" --rdzv_id="writers-$b-$$"
             --rdzv_conf=join_timeout=60,heartbeat_timeout=3,spares=1)
  out=("$T/${b}_a.out" "$T/${b}_b.out" "$T/${b}_s.out")
  read -r -a cmd <<<"$(program "$b") $(pause)"
  export SNAPSHOT_WRITERS_PAUSE="9:$T/go_on"  # probe.py's pause; train's is in its arguments
  nsnode 127.0.0.2 "${b}_a" "${job[@]}" --event_log="$T/${b}_a.events" "${cmd[@]}"
  nsnode 127.0.0.3 "${b}_b" "${job[@]}" --event_log="$T/${b}_b.events" "${cmd[@]}"
  # The spare, once the two formed the round, and before the pause.
  for n in a b; do wait_for 120 grep -qs '"event":"round_started"' "$T/${b}_$n.events"; done
  nsnode 127.0.0.4 "${b}_s" "${job[@]}" --event_log="$T/${b}_s.events" "${cmd[@]}"
  wait_for 60 grep -q "this node is a hot spare" "$T/${b}_s.err"
  poll_until 120 paused || { show "${b}_a" "${b}_b" >&2; fail "$what [$b]: the ranks did not both reach the pause"; }
  poll_until 60 replicated "${b}_a" "${b}_b" || {
    for n in a b; do echo "--- node $n's folder:"; files "${b}_$n"; done >&2
    fail "$what [$b]: the two nodes' folders did not come to hold the same files"
  }

  # Node a hosts c10d's store: c10d loses b; etcd loses rank 0's node.
  if [[ $b == c10d ]] || grep -q '^\[rank0\]: ' "$T/${b}_b.out"; then victim=b survivor=a; else victim=a survivor=b; fi
  workers=$(grep "$paused_pattern" "$T/${b}_$victim.out" | sed -n 's/.*pid[= ]\([0-9]*\).*/\1/p' | paste -sd,)
  [[ -n $workers ]] || fail "$what [$b]: no paused worker on node $victim"
  touch "$T/go_on"
  kill -KILL "$(pid "${b}_$victim")"
  finish "${b}_$victim"
  gone() { ! ps -o stat= -p "$workers" | grep -qv '^Z'; }
  poll_until 30 gone || fail "$what [$b]: node $victim's workers ($workers) outlived its ddprun's SIGKILL by 30 s"
  for n in "$survivor" s; do
    finish_within 180 "${b}_$n"
    expect_eq "$(eval echo "\$RC_${b}_$n")" 0 "$what [$b]: node $n's exit ($(show "${b}_$n"))"
  done
  expect_in "$T/${b}_s.err" "this spare joins round"
  expect_in "$T/${b}_s.err" "snapshots: [0-9]+ files? fetched from the other nodes"
  expect_in "$T/${b}_s.events" '"event":"snapshot_restore"'

  if [[ $which == cpp ]]; then
    expect_eq "$(cat "${out[@]}" | grep -c "resumed from the checkpoint after epoch 2 ")" 1 \
      "$what [$b]: lines saying the second round resumed after epoch 2 (the last checkpoint committed before the SIGKILL at step 40)"
    expect_eq "$(cat "${out[@]}" | grep -c "resumed from the checkpoint")" 1 "$what [$b]: resumes"
    cmp -s "$T/reference.params" "$T/$b.params" || fail "$what [$b]: the resumed run ends with other parameters than the uninterrupted one"
    ok "[$b] $what: node $victim SIGKILLed before step 40 (its workers with it), the spare took its place, the job resumed after epoch 2 and ends with the reference's parameters bit for bit"
  else
    for r in 0 1; do
      starts=$(matches $r "attempt=" "${out[@]}")
      [[ $(grep -c " resumed_at=0 " <<<"$starts") == 1 ]] || fail "$what [$b]: rank $r did not start afresh once: $starts"
      resumed=$(grep -v " resumed_at=0 " <<<"$starts" || true)
      [[ $(wc -l <<<"$resumed") == 1 && $resumed =~ \ resumed_at=8\ checksum=([0-9a-f]+) ]] \
        || fail "$what [$b]: rank $r resumed at '$resumed', not at step 8 (the last checkpoint committed before the node's SIGKILL after step 9)"
      expect_eq "${BASH_REMATCH[1]}" "$reference8" "$what [$b]: rank $r's parameters at the resume against the reference's after step 8"
      expect_eq "$(at $r 12 "${out[@]}")" "$reference12" "$what [$b]: rank $r's final parameters against the reference's"
    done
    # The second round ran on the survivor and the spare, one rank each.
    for n in "$survivor" s; do
      [[ $(grep -c "RESULT rank=[01] .* resumed_at=8 " "$T/${b}_$n.out") == 1 ]] \
        || fail "$what [$b]: node $n did not run one rank of the second round: $(grep "resumed_at=" "$T/${b}_$n.out")"
    done
    ok "[$b] $what: node $victim SIGKILLed after step 9 (its workers with it), the spare took its place, every rank resumed at step 8 with the reference's parameters bit for bit, and ends with them ($reference12)"
  fi
  wait_for 30 no_job_left
}

BACKEND=c10d RDZV=(--rdzv_backend=c10d --rdzv_endpoint=127.0.0.2:$port)
scenario
# etcd: the secret authenticates the copies, as with c10d.
if command -v etcd >/dev/null && command -v etcdctl >/dev/null && command -v curl >/dev/null; then
  source "$DDPRUN_TESTS_DIR/elastic/etcd_lib.sh"
  etcd_members http solo
  BACKEND=etcd RDZV=(--rdzv_backend=etcd --rdzv_endpoint=127.0.0.1:$CLIENT_solo)
  scenario
  kill "$ETCD_solo"; wait "$ETCD_solo" 2>/dev/null || true
else
  echo "skipped: the etcd run (needs etcd, etcdctl and curl)"
fi
