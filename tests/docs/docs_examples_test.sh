#!/usr/bin/env bash
# The manual's runnable console examples (a console code-block of class runnable) run against
# this build's ddprun with docs/examples/train.py, and print the lines they show
# (run_examples.py says how lines are matched).
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
python3 "$DDPRUN_TESTS_DIR/docs/run_examples.py" "$DDPRUN_SOURCE_DIR/docs" "$DDPRUN" "$T"
