#!/usr/bin/env bash
# The checkpoint writers people use, unchanged but for their folder (DDPRUN_SNAPSHOT_DIR), resume
# after a worker's SIGKILL from what they committed last (issue 57). For one WRITER of
# tests/launcher/snapshot_writers/ on one PYTHON (debian: /usr/bin/python3 and its torch 1.13;
# venv: the torch 2.x venv of scripts/install-deps.sh --torch2):
#   snapshot_writers_test.sh WRITER PYTHON
# two runs of the script under ddprun --nproc_per_node=2 (gloo, CPU), 12 steps, a checkpoint every
# 4: one uninterrupted (the reference), and one whose rank KILL_RANK SIGKILLs itself after step 9
# (probe.py) under --max_restarts=1. The restarted workers must say they resumed at step 8 (the
# last checkpoint committed, not the first), every rank with the parameters the reference had after
# step 8, bit for bit, and finish with the reference's final parameters; the folder then holds the
# writer's files. Skipped, saying so, where PYTHON lacks what the writer needs.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
writer=$1 which=$2
case $which in
  debian) python=/usr/bin/python3 ;;
  venv) python=$TORCH2_PYTHON ;;
  *) fail "usage: snapshot_writers_test.sh WRITER debian|venv" ;;
esac
case $writer in
  torch_save) needs=torch.distributed kill_rank=0 ;;
  dcp) needs=torch.distributed.checkpoint.state_dict kill_rank=1 ;;
  lightning_ckpt) needs=lightning kill_rank=0 ;;
  hf_trainer) needs=transformers kill_rank=1 ;;
  *) fail "no writer $writer" ;;
esac
"$python" -c "import $needs" 2>/dev/null \
  || skip "$python has no $needs (the $writer writer; scripts/install-deps.sh --torch2 installs the venv)"
unset PYTHONPATH
export PYTHON_EXEC=$python HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
v=$("$python" -c 'import torch; print(torch.__version__)')
cp -r "$DDPRUN_TESTS_DIR/launcher/snapshot_writers" "$T/writers"
script=$T/writers/$writer.py
# Where ddprun puts the snapshot folders (launcher/snapshots/README.md); the kept one goes with the test.
if [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then parent=/dev/shm; else parent=${TMPDIR:-/tmp}; fi
id_base="writers-$(basename "$T")"
folder=$parent/ddprun-snapshots.$(id -u).$id_base-killed
trap 'rc=$?; rm -rf "$folder"; cleanup $rc' EXIT

# line NAME RANK FIELDS: the value of the RESULT line of rank RANK in run NAME that starts with
# FIELDS, without them (one line expected). FIELDS ends a field, or ends with '=' to match any value.
line() {
  local found start="^\[rank$2\]: RESULT rank=$2 $3"
  [[ $3 == *= ]] || start+='\( \|$\)'
  found=$(sed -n "s/$start//p" "$T/$1.out")
  [[ $(grep -c "$start" "$T/$1.out") == 1 ]] || fail "$writer ($v): expected one RESULT line 'rank=$2 $3' in $1, found: '$found'"
  echo "$found"
}
# at NAME RANK STEP: the parameters' digest after STEP in run NAME.
at() { line "$1" "$2" "step=$3" | sed -n 's/^checksum=//p'; }

run_ddprun reference --nproc_per_node=2 --rdzv_id="$id_base-reference" "$script" 12 4
[[ $RC == 0 ]] || { tail -30 "$T/reference.err" "$T/reference.out"; fail "$writer ($v): the reference run: exit $RC"; }
SNAPSHOT_WRITERS_KILL=$kill_rank:9 run_ddprun killed --nproc_per_node=2 --max_restarts=1 --restart_backoff_max=0 \
  --snapshot_keep --rdzv_id="$id_base-killed" "$script" 12 4
[[ $RC == 0 ]] || { tail -30 "$T/killed.err" "$T/killed.out"; fail "$writer ($v): the killed run: exit $RC"; }
expect_in "$T/killed.err" "rank $kill_rank \(local rank $kill_rank\) failed: .*SIGKILL"
line killed "$kill_rank" killed_after_step=9 >/dev/null
for r in 0 1; do
  # Each value assigned first: a line not found then ends the test (set -e), never compares as "".
  reference8=$(at reference $r 8)
  reference12=$(at reference $r 12)
  killed12=$(at killed $r 12)
  expect_eq "$reference8" "$(at reference 0 8)" "$writer ($v): the reference's ranks after step 8"
  first=$(line killed $r "attempt=0 resumed_at=")
  [[ $first == 0\ * ]] || fail "$writer ($v): rank $r's first attempt did not start afresh: resumed_at=$first"
  resumed=$(line killed $r "attempt=1 resumed_at=")
  [[ $resumed =~ ^8\ checksum=([0-9a-f]+) ]] \
    || fail "$writer ($v): rank $r resumed at '$resumed', not at step 8 (the last checkpoint committed before the SIGKILL after step 9)"
  expect_eq "${BASH_REMATCH[1]}" "$reference8" "$writer ($v): rank $r's parameters at the resume against the reference's after step 8"
  expect_eq "$killed12" "$reference12" "$writer ($v): rank $r's final parameters against the reference's"
done
if [[ $writer == lightning_ckpt ]]; then
  # Lightning took ddprun's processes and ranks (torchelastic's environment), and started none.
  for r in 0 1; do
    for run in reference killed; do
      [[ $(line $run $r "attempt=0 resumed_at=") == *" global_rank=$r world=2 environment=TorchElasticEnvironment launcher=ddprun" ]] \
        || fail "lightning ($v): rank $r of the $run run: not ddprun's rank $r of 2 under torchelastic's environment: $(line $run $r "attempt=0 resumed_at=")"
    done
  done
fi
ok "$writer, torch $v: SIGKILL of rank $kill_rank after step 9, restart, every rank resumed at step 8 with the reference's parameters bit for bit, and ends with them ($reference12)"

# What the writer left in the folder (kept by --snapshot_keep).
[[ -d $folder ]] || fail "$writer ($v): no kept snapshot folder $folder"
(cd "$folder" && find . -mindepth 1 -maxdepth 2 | sort | sed 's|^\./||') >"$T/files"
case $writer in
  torch_save) expected="checkpoint_000004.pt checkpoint_000008.pt checkpoint_000012.pt" ;;
  dcp) expected="step_12/.metadata step_4/.metadata step_8/.metadata" ;;
  lightning_ckpt) expected="epoch=11-step=12.ckpt last.ckpt" ;;
  hf_trainer) expected="checkpoint-12/trainer_state.json checkpoint-4/trainer_state.json checkpoint-8/trainer_state.json" ;;
esac
for f in $expected; do grep -qxF "$f" "$T/files" || fail "$writer ($v): no $f in the folder: $(tr '\n' ' ' <"$T/files")"; done
expect_not_in "$T/files" "\.tmp$"
ok "$writer, torch $v: the folder holds $expected"
wait_for 10 no_leftovers
