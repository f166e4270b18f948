#!/usr/bin/env bash
# How slow a link may be before a node is lost (issue 43): tests/elastic/delay_test.sh for each
# backend, heartbeat_timeout and one-way delay asked (each with a jitter of a quarter of it, for
# SECONDS), a line each: whether the job ran through it (nobody lost or fenced, no restart, the job
# ended 0) or what ended it. As root, with nftables, iptables and etcd (scripts/install-deps.sh).
#
#   scripts/delay-tolerance.sh [--backends "tcp etcd"] [--timeouts "3 5"] [--delays "100 200 ..."]
#                              [--seconds N] [--build DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
backends="tcp etcd" timeouts="3 5" delays="100 200 300 400 600 800 1000 1500" seconds=15 build=$root/build
while (( $# )); do
  case $1 in
    --backends) backends=${2:?}; shift 2 ;;
    --timeouts) timeouts=${2:?}; shift 2 ;;
    --delays) delays=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --build) build=${2:?}; shift 2 ;;
    *) echo "delay-tolerance: unknown option $1 (expected --backends, --timeouts, --delays, --seconds, --build)" >&2; exit 64 ;;
  esac
done
[[ -x $build/launcher/ddprun ]] || { echo "delay-tolerance: no ddprun in $build/launcher (scripts/build.sh, or --build)" >&2; exit 64; }
export DDPRUN=$build/launcher/ddprun DDPRUN_BUILD_DIR=$build DDPRUN_SOURCE_DIR=$root DDPRUN_TESTS_DIR=$root/tests
echo "backend  heartbeat_timeout  one-way delay (ms, jitter a quarter)  for ${seconds} s: result"
for backend in $backends; do
  for timeout in $timeouts; do
    for ms in $delays; do
      out=$(DELAY_HEARTBEAT_TIMEOUT=$timeout bash "$root/tests/elastic/delay_test.sh" "$backend" "$ms" "$seconds" 2>&1)
      rc=$?
      if (( rc == 0 )); then
        result="ran through"
      else
        result=$(grep -m1 -o "fencing: [^:]*\|was lost[^;]*\|FAIL: .*" <<< "$out" | head -c 160)
      fi
      printf '%-7s  %-17s  %-36s  %s\n' "$backend" "$timeout" "$ms" "${result:-exit $rc}"
    done
  done
done
