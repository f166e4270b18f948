#!/usr/bin/env bash
# Communication hooks against PyTorch itself (issue 18): the same model, weights and batches
# through Python DDP with PyTorch's hook (tests/worker/hooks_reference.py, TORCH_PYTHON, whose
# libtorch is the one built against) and through the C++ wrapper with ddprun's, 2 gloo ranks,
# 8 steps: the parameters must be identical (the arithmetic is the same). allreduce_hook must
# also give exactly what no hook gives, and fp16 compression must differ from it (the test
# would be blind otherwise). Registering a hook twice, or after a backward pass, is refused.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
"$TORCH_PYTHON" -c 'import torch.distributed.algorithms.ddp_comm_hooks' 2>/dev/null \
  || skip "$TORCH_PYTHON has no torch with DDP communication hooks"
steps=8

# bfloat16 all-reduce exists in gloo from PyTorch 2.1 on.
hooks=(none allreduce fp16 fp16_wrapper)
if "$TORCH_PYTHON" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)'; then
  hooks+=(bf16 bf16_wrapper)
else
  echo "not run: bf16 hooks (gloo of torch $("$TORCH_PYTHON" -c 'import torch; print(torch.__version__)') has no bfloat16 all-reduce)"
fi
for hook in "${hooks[@]}"; do
  mkdir -p "$T/cpp_$hook" "$T/py_$hook"
  "$DDPRUN" --nproc_per_node=2 "$RANK_DRIVER" hooks "$T/cpp_$hook" "$hook" $steps >"$T/cpp_$hook.log" 2>&1 \
    || { cat "$T/cpp_$hook.log"; fail "$hook: the C++ run failed"; }
  PYTHON_EXEC=$TORCH_PYTHON "$DDPRUN" --nproc_per_node=2 "$DDPRUN_TESTS_DIR/worker/hooks_reference.py" \
    "$T/py_$hook" "$hook" $steps >"$T/py_$hook.log" 2>&1 || { cat "$T/py_$hook.log"; fail "$hook: the Python run failed"; }
  for r in 0 1; do
    "$RANK_DRIVER" compare "$T/py_$hook/params.$r" "$T/cpp_$hook/params.$r" 0 >"$T/compare.log" \
      || { cat "$T/compare.log"; fail "$hook, rank $r: C++ differs from PyTorch's DDP"; }
  done
  cmp -s "$T/cpp_$hook/params.0" "$T/cpp_$hook/params.1" || fail "$hook: the C++ ranks differ"
  ok "$hook: the same parameters as PyTorch's DDP with its hook, on both ranks"
done
cmp -s "$T/cpp_none/params.0" "$T/cpp_allreduce/params.0" || fail "allreduce_hook differs from no hook"
! cmp -s "$T/cpp_none/params.0" "$T/cpp_fp16/params.0" || fail "fp16 compression changed nothing: the test cannot see hooks"
ok "allreduce_hook is exactly the built-in average; fp16 compression is visible"
expect_in "$T/cpp_none/late.1" "register the hook before the first backward pass"
expect_in "$T/cpp_fp16/late.0" "a hook is already registered"
ok "a hook registered after a backward pass, or a second hook, is refused"
