#!/usr/bin/env bash
# Configures and builds ddprun (launcher, worker library, example train, tests) into build/.
#   scripts/build.sh [extra cmake -D options]
# DDPRUN_BUILD_DIR overrides the folder; DDPRUN_JOBS the parallel jobs (default: cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDPRUN_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C "$build" -j "${DDPRUN_JOBS:-$(nproc)}"
