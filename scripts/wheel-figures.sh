#!/usr/bin/env bash
# The figures of docs/wheels.md, measured in one run and printed as its Markdown table:
#   scripts/wheel-figures.sh WHEEL...      (the wheels scripts/build-wheel.sh made)
# Each wheel's size; for the one of this machine's CPU, the time of `pip install` from the wheel
# file into a fresh venv (py-spy from the kept wheels, no index), and `ddprun --version` through
# pip's entry point, through `python -m ddprun` and run as the bare binary (hyperfine, warm cache).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/torch2-env.sh"
(( $# > 0 )) || { echo "usage: scripts/wheel-figures.sh WHEEL..." >&2; exit 64; }
command -v hyperfine >/dev/null || { echo "wheel-figures: needs hyperfine (scripts/install-deps.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| what | figure |"
echo "|---|---|"
native=""
for wheel in "$@"; do
  echo "| size of \`$(basename "$wheel")\` | $(( $(stat -c %s "$wheel") / 1024 )) KiB |"
  [[ $wheel == *"_$(uname -m).whl" ]] && native=$wheel
done
[[ -n $native ]] || { echo "wheel-figures: no $(uname -m) wheel given, nothing to install" >&2; exit 1; }
/usr/bin/python3 -m venv "$tmp/venv"
V=$tmp/venv/bin
start=$(date +%s.%N)
"$V/python" -m pip install --disable-pip-version-check -q --no-index --find-links "$TORCH2_WHEELS" "$native"
end=$(date +%s.%N)
python3 -c "print(f'| \`pip install\` from the wheel file (with py-spy, no index), fresh venv | {$end - $start:.1f} s |')"
bare=$("$V/python" -c 'import ddprun._launch as l; print(l.executable())')
hyperfine -N --warmup 20 --runs 200 --export-json "$tmp/h.json" \
  -n "ddprun --version (pip's entry point)" "$V/ddprun --version" \
  -n "python -m ddprun --version" "$V/python -m ddprun --version" \
  -n "the bare binary --version" "$bare --version" >/dev/null
/usr/bin/python3 - "$tmp/h.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"| {r['command']} | {r['mean'] * 1000:.1f} ± {r['stddev'] * 1000:.1f} ms |")
PY
echo
echo "Measured by scripts/wheel-figures.sh on $(nproc) cores, $(uname -m), $(. /etc/os-release; echo "$PRETTY_NAME"), $(date -u +%Y-%m-%d)."
