#!/usr/bin/env bash
# README.md's first command: installs what is missing, builds, and runs the main job:
# ddprun starting the example train on 2 CPU workers. Installs and builds only what that needs
# (install-deps.sh --main, build.sh --main: no test programs); scripts/run-tests.sh adds the rest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh" --main
"$root/scripts/build.sh" --main
build=${DDPRUN_BUILD_DIR:-$root/build}
# The checkpoints are for a restart within this job; a new run starts from scratch.
checkpoints=$(mktemp -d "${TMPDIR:-/tmp}/ddprun-main.XXXXXX")
trap 'rm -rf "$checkpoints"' EXIT
"$build/launcher/ddprun" --nproc_per_node=2 --max_restarts=1 \
  "$build/worker/train" --epochs 3 --checkpoint-dir "$checkpoints" "$@"
