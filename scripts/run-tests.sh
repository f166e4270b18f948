#!/usr/bin/env bash
# README.md's second command (and all that .ci/run does): installs what is missing (SLURM and
# PyTorch 2.x included), builds against both libtorch builds, and runs the whole test suite
# through CTest: everything against Debian's libtorch 1.13 (build/), then the worker library's
# tests again against PyTorch 2.x (build-torch2/), then the fuzz targets, the launcher's unit
# tests and the bad-input test built with clang, ASan and UBSan (build-fuzz/). Extra arguments go to every ctest
# run. Ends with the reason of each skipped test and the total over all runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# timed WHAT COMMAND...: runs it and says how long it took (CI's limit is on the whole run).
timed() {
  local what=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "== $what: $((SECONDS - start)) s (exit $rc)"
  return $rc
}
timed "install-deps" "$root/scripts/install-deps.sh" --slurm --torch2
timed "build/" "$root/scripts/build.sh"
timed "build-torch2/" "$root/scripts/build.sh" --torch2
timed "build-fuzz/" "$root/scripts/build.sh" --fuzz
jobs=${DDPRUN_TEST_JOBS:-2}
build=${DDPRUN_BUILD_DIR:-$root/build}
build2=${DDPRUN_TORCH2_BUILD_DIR:-$root/build-torch2}
build3=${DDPRUN_FUZZ_BUILD_DIR:-$root/build-fuzz}
status=0
echo "== tests against Debian's libtorch 1.13 ($build)"
timed "tests in build/" bash -c 'cd "$1" && shift && ctest --output-on-failure "$@"' _ "$build" -j "$jobs" --output-junit "$build/ctest.xml" "$@" || status=1
echo "== worker library tests against PyTorch 2.x ($build2)"
timed "tests in build-torch2/" bash -c 'cd "$1" && shift && ctest --output-on-failure "$@"' _ "$build2" -j "$jobs" --output-junit "$build2/ctest.xml" "$@" || status=1
echo "== fuzz targets (20 s each), the launcher's unit tests and bad input under ASan/UBSan ($build3)"
timed "tests in build-fuzz/" bash -c 'cd "$1" && shift && ctest --output-on-failure "$@"' _ "$build3" -j "$jobs" -L 'fuzz|unit|sanitize' --output-junit "$build3/ctest.xml" "$@" || status=1
echo "== all: $SECONDS s"
"$root/scripts/test-summary.py" "libtorch 1.13=$build/ctest.xml" "PyTorch 2.x=$build2/ctest.xml" \
  "ASan/UBSan, fuzz=$build3/ctest.xml" || status=1
exit $status
