#!/usr/bin/env bash
# README.md's second command (and all that .ci/run does): installs what is missing (SLURM and
# PyTorch 2.x included), builds against both libtorch builds, and runs the whole test suite
# through CTest: everything against Debian's libtorch 1.13 (build/), then the worker library's
# tests again against PyTorch 2.x (build-torch2/), then the fuzz targets, the launcher's unit
# tests and the bad-input test built with clang, ASan and UBSan (build-fuzz/). Extra arguments go to every ctest
# run. Ends with the reason of each skipped test and the total over all runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh" --slurm --torch2
"$root/scripts/build.sh"
"$root/scripts/build.sh" --torch2
"$root/scripts/build.sh" --fuzz
jobs=${DDPRUN_TEST_JOBS:-2}
build=${DDPRUN_BUILD_DIR:-$root/build}
build2=${DDPRUN_TORCH2_BUILD_DIR:-$root/build-torch2}
build3=${DDPRUN_FUZZ_BUILD_DIR:-$root/build-fuzz}
status=0
echo "== tests against Debian's libtorch 1.13 ($build)"
(cd "$build" && ctest --output-on-failure -j "$jobs" --output-junit "$build/ctest.xml" "$@") || status=1
echo "== worker library tests against PyTorch 2.x ($build2)"
(cd "$build2" && ctest --output-on-failure -j "$jobs" --output-junit "$build2/ctest.xml" "$@") || status=1
echo "== fuzz targets (20 s each), the launcher's unit tests and bad input under ASan/UBSan ($build3)"
(cd "$build3" && ctest --output-on-failure -j "$jobs" -L 'fuzz|unit|sanitize' --output-junit "$build3/ctest.xml" "$@") || status=1
"$root/scripts/test-summary.py" "libtorch 1.13=$build/ctest.xml" "PyTorch 2.x=$build2/ctest.xml" \
  "ASan/UBSan, fuzz=$build3/ctest.xml" || status=1
exit $status
