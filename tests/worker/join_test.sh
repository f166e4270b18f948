#!/usr/bin/env bash
# Join (uneven inputs) and static_graph against PyTorch itself (issue 18): the same models,
# weights and batches through PyTorch's DDP (tests/worker/join_reference.py, TORCH_PYTHON, whose
# libtorch is the one built against) and through ddprun's (tests/worker/join_driver.cpp), 2 gloo
# ranks. The arithmetic is the same, so the parameters and buffers must be identical.
#  - Join: the ranks train different numbers of batches, either rank the longer one, gradients
#    divided by the initial world size or by the ranks still training. The job must end (a rank
#    that does not shadow a collective hangs its peer: the collective timeout and `timeout`
#    turn that into a failure) with every rank holding PyTorch's model.
#  - Join with a communication hook (fp16, PowerSGD; bf16 on 2.x) and with static_graph.
#  - throw_on_early_termination: every rank throws, at the same point as in PyTorch.
#  - static_graph: an unused layer and a layer used twice, the second time inside a reentrant
#    (checkpointed) backward; without static_graph the second gradient must be refused (as
#    PyTorch's DDP refuses it: "Expected to mark a variable ready only once").
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
"$TORCH_PYTHON" -c 'import torch.distributed.algorithms.join' 2>/dev/null \
  || skip "$TORCH_PYTHON has no torch with torch.distributed.algorithms.join"
export DDPRUN_COLLECTIVE_TIMEOUT=60  # C++ ranks: a missing collective fails after 60 s
limit=240                            # whole job, either side (Python's gloo waits 30 min)

# cpp|py NAME ARGS...: one 2-rank job, its output in $T/NAME.log; fails the test if it fails.
job() {
  local side=$1 name=$2; shift 2
  mkdir -p "$T/$name"
  local rc=0
  if [[ $side == cpp ]]; then
    timeout -k 10 $limit "$DDPRUN" --nproc_per_node=2 "$JOIN_DRIVER" "$1" "$T/$name" "${@:2}" >"$T/$name.log" 2>&1 || rc=$?
  else
    PYTHON_EXEC=$TORCH_PYTHON timeout -k 10 $limit "$DDPRUN" --nproc_per_node=2 \
      "$DDPRUN_TESTS_DIR/worker/join_reference.py" "$1" "$T/$name" "${@:2}" >"$T/$name.log" 2>&1 || rc=$?
  fi
  (( rc != 124 )) || { cat "$T/$name.log"; fail "$name: still running after ${limit}s (a hang)"; }
  (( rc == 0 )) || { cat "$T/$name.log"; fail "$name: the $side job failed (exit $rc)"; }
}

# same_as_pytorch NAME: both ranks' parameters and buffers equal PyTorch's, exactly.
same_as_pytorch() {
  for r in 0 1; do
    "$RANK_DRIVER" compare "$T/py_$1/params.$r" "$T/cpp_$1/params.$r" 0 >"$T/compare.log" \
      || { cat "$T/compare.log"; fail "$1, rank $r: C++ differs from PyTorch's DDP"; }
  done
  cmp -s "$T/cpp_$1/params.0" "$T/cpp_$1/params.1" || fail "$1: the C++ ranks ended with different models"
}

for run in "3 7 initial" "7 3 initial" "3 7 active" "5 5 initial"; do
  read -r s0 s1 divide <<<"$run"
  name="uneven_${s0}_${s1}_$divide"
  job cpp "cpp_$name" uneven "$s0" "$s1" "$divide"
  job py "py_$name" uneven "$s0" "$s1" "$divide"
  same_as_pytorch "$name"
  ok "Join, $s0 and $s1 batches, divided by the $divide world size: PyTorch's model on both ranks"
done
# A compression hook under Join: the joined rank runs the hook on zeros, as PyTorch's does (an
# fp32 all-reduce against the others' fp16 one would mix up the buffers or hang). bf16 only where
# gloo has a bfloat16 all-reduce (PyTorch 2.1 on).
hooks=(fp16 powersgd)
if "$TORCH_PYTHON" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)'; then
  hooks+=(bf16)
else
  echo "not run: Join with the bf16 hook (gloo of this torch has no bfloat16 all-reduce)"
fi
for hook in "${hooks[@]}"; do
  for divide in initial active; do
    name="uneven_3_7_${divide}_$hook"
    job cpp "cpp_$name" uneven 3 7 "$divide" "$hook"
    job py "py_$name" uneven 3 7 "$divide" "$hook"
    same_as_pytorch "$name"
  done
  ok "Join with the $hook hook, both divide modes: PyTorch's model on both ranks"
done
for run in "3 7" "7 3"; do
  read -r s0 s1 <<<"$run"
  name="uneven_${s0}_${s1}_initial_static"
  job cpp "cpp_$name" uneven "$s0" "$s1" initial static
  job py "py_$name" uneven "$s0" "$s1" initial static
  same_as_pytorch "$name"
done
ok "Join with static_graph, either rank the longer: PyTorch's model on both ranks"
# Skew: PyTorch warns (once) when a rank has shadowed more than 1000 iterations of the others; at
# 1001 it does, at 1000 it does not. Both sides, on the same side of the line.
for run in "2 1003 1" "2 1002 0"; do
  read -r s0 s1 warns <<<"$run"
  name="uneven_${s0}_${s1}_initial"
  job cpp "cpp_$name" uneven "$s0" "$s1" initial
  job py "py_$name" uneven "$s0" "$s1" initial
  same_as_pytorch "$name"
  for side in cpp py; do
    expect_eq "$(grep -ci "uneven input skew of greater than 1000" "$T/${side}_$name.log" || true)" "$warns" \
      "$side, skew $((s1 - s0)): skew warnings"
  done
done
ok "Join: the skew warning past 1000 shadowed iterations, as PyTorch's (1001: once; 1000: none)"
# Dividing by the ranks still training must change the result, or the test could not see it.
! cmp -s "$T/cpp_uneven_3_7_initial/params.0" "$T/cpp_uneven_3_7_active/params.0" \
  || fail "divide_by_initial_world_size changed nothing"

job cpp cpp_throw throw 2 5
job py py_throw throw 2 5
for r in 0 1; do
  expect_eq "$(head -1 "$T/cpp_throw/thrown.$r")" "$(head -1 "$T/py_throw/thrown.$r")" "rank $r threw at"
done
expect_eq "$(head -1 "$T/cpp_throw/thrown.0")" "finish" "the rank out of inputs throws from finish()"
expect_in "$T/cpp_throw/thrown.0" "rank 0 exhausted its inputs while 1 rank\(s\) were still training"
expect_eq "$(head -1 "$T/cpp_throw/thrown.1")" "step 2" "the training rank throws in its next forward pass"
expect_in "$T/cpp_throw/thrown.1" "at least one rank exhausted its inputs"
ok "throw_on_early_termination: both ranks throw where PyTorch's do ($(head -1 "$T/cpp_throw/thrown.1") and finish)"
# Without finish(), the exception surfaces in the Join's destructor, which cannot throw: it says
# so and ends the process (rank 0), and the job fails instead of hanging.
mkdir -p "$T/scope_end"
rc=0
timeout -k 10 $limit "$DDPRUN" --nproc_per_node=2 "$JOIN_DRIVER" throw_at_scope_end "$T/scope_end" 2 5 \
  >"$T/scope_end.log" 2>&1 || rc=$?
(( rc != 124 )) || { cat "$T/scope_end.log"; fail "throw_at_scope_end: still running after ${limit}s (a hang)"; }
(( rc != 0 )) || { cat "$T/scope_end.log"; fail "throw_at_scope_end: the job succeeded"; }
expect_in "$T/scope_end.log" "rank 0 exhausted its inputs.*"
expect_in "$T/scope_end.log" "call Join::finish\(\) to catch it"
expect_in "$T/scope_end/thrown.1" "at least one rank exhausted its inputs"
ok "an exception at the end of a Join's scope without finish() ends the process, saying why (exit $rc)"

"$JOIN_DRIVER" api >"$T/api.log" 2>&1 || { cat "$T/api.log"; fail "the Join's argument checks"; }
ok "Join refuses no joinables, a null one, a joinable already in a Join; works alone"

job cpp cpp_static static 6 static
job py py_static static 6
same_as_pytorch static
ok "static_graph with an unused layer and a layer used twice (reentrant checkpoint): PyTorch's model"
job cpp cpp_plain static 6 plain
for r in 0 1; do expect_in "$T/cpp_plain/error.$r" "parameter s\.(weight|bias) got a second gradient in one backward pass"; done
ok "without static_graph, a second gradient in one backward pass is refused, naming the parameter"
