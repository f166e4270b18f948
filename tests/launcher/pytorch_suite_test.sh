#!/usr/bin/env bash
# PyTorch's own launcher tests (test_run.py's command-line cases, issue 59) against one launcher:
#   pytorch_suite_test.sh ddprun     the real ddprun; the workers on TORCH_PYTHON (Debian's torch)
#   pytorch_suite_test.sh torchrun   torchrun 2.11 of the venv (scripts/torch2-env.sh), the same
#                                    table and assertions; skipped, saying so, without the venv
# The table, the workers standing for PyTorch's bin/ scripts, the known differences and the cases
# that cannot be ported are in pytorch_suite/suite.py.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
case ${1:?ddprun or torchrun} in
  ddprun)
    export PYTHON_EXEC=${TORCH_PYTHON:-python3}
    # Found, not imported (an import costs seconds on a loaded machine; the workers import it).
    "$PYTHON_EXEC" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null ||
      skip "$PYTHON_EXEC has no torch"
    launcher=$DDPRUN ;;
  torchrun)
    source "$DDPRUN_SOURCE_DIR/scripts/torch2-env.sh"
    [[ -x "$TORCH2_VENV/bin/torchrun" ]] || skip "torchrun 2.x is not installed in $TORCH2_VENV (scripts/install-deps.sh --torch2 makes it)"
    export PYTHON_EXEC=$TORCH2_PYTHON
    launcher=$TORCH2_VENV/bin/torchrun ;;
  *) fail "expected ddprun or torchrun, got $1" ;;
esac
unset PYTHONPATH
python3 "$DDPRUN_TESTS_DIR/launcher/pytorch_suite/suite.py" "$launcher" "${@:2}" || fail "a case of PyTorch's suite failed (above)"
no_leftovers || fail "processes left behind: $(leftovers)"
ok "PyTorch's launcher suite against $1"
