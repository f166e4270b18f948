#!/usr/bin/env bash
# The README's second command (and all that .ci/run does): installs what is missing,
# SLURM included, builds, and runs the whole test suite through CTest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh" --slurm
"$root/scripts/build.sh"
build=${DDPRUN_BUILD_DIR:-$root/build}
cd "$build"
exec ctest --output-on-failure -j "${DDPRUN_TEST_JOBS:-2}" "$@"
