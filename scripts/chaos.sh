#!/usr/bin/env bash
# A randomised schedule of network and process faults against a 4-node ddprun job, as long as asked,
# then the split-brain checker (issue 43): tests/elastic/chaos_test.sh, which CI runs for 90 s with
# fixed seeds, run for longer or with another seed. As root (network namespaces), with nftables and,
# for --backend etcd, etcd (scripts/install-deps.sh installs both).
#
#   scripts/chaos.sh [--backend tcp|etcd] [--minutes N] [--seed S] [--build DIR]
#
# The seed is printed at the start, and the line that runs the same schedule again on a failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
backend=tcp minutes=5 seed= build=$root/build
while (( $# )); do
  case $1 in
    --backend) backend=${2:?--backend needs tcp or etcd}; shift 2 ;;
    --minutes) minutes=${2:?--minutes needs a number}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    *) echo "chaos: unknown option $1 (expected --backend, --minutes, --seed, --build)" >&2; exit 64 ;;
  esac
done
[[ $backend == tcp || $backend == etcd ]] || { echo "chaos: --backend tcp or etcd, not '$backend'" >&2; exit 64; }
[[ $minutes =~ ^[0-9]+$ && $minutes -ge 1 ]] || { echo "chaos: --minutes must be a whole number of minutes, at least 1, not '$minutes'" >&2; exit 64; }
[[ -z $seed || $seed =~ ^[0-9]+$ ]] || { echo "chaos: --seed must be a non-negative integer, not '$seed'" >&2; exit 64; }
[[ -x $build/launcher/ddprun ]] || { echo "chaos: no ddprun in $build/launcher (build it with scripts/build.sh, or give --build)" >&2; exit 64; }
export DDPRUN=$build/launcher/ddprun DDPRUN_BUILD_DIR=$build DDPRUN_SOURCE_DIR=$root DDPRUN_TESTS_DIR=$root/tests
exec bash "$root/tests/elastic/chaos_test.sh" "$backend" $((minutes * 60)) $seed
