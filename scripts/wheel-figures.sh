#!/usr/bin/env bash
# The figures of docs/performance.md's "The wheels", measured in one run and printed as its
# Markdown table:
#   scripts/wheel-figures.sh WHEEL...      (the wheels scripts/build-wheel.sh made)
# Each wheel's size; for the one of this machine's CPU, the time of `pip install` from the wheel
# file into a fresh venv (py-spy from the kept wheels, no index); then `--version` (hyperfine,
# warm cache, medians) of: the installed `ddprun` (the launcher itself, in the venv's bin/);
# `python -m ddprun`; the console script pip would make for `ddprun._launch:main`, which is what
# the `ddprun` command was before the wheel put the launcher itself on the PATH; and a C++ hello
# world for scale, its C++ runtime linked in as the launcher's is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/torch2-env.sh"
(( $# > 0 )) || { echo "usage: scripts/wheel-figures.sh WHEEL..." >&2; exit 64; }
command -v hyperfine >/dev/null || { echo "wheel-figures: needs hyperfine (scripts/install-deps.sh)" >&2; exit 1; }
command -v g++ >/dev/null || { echo "wheel-figures: needs g++ for the hello world (build-essential)" >&2; exit 1; }
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
file -b "$V/ddprun" | grep -q '^ELF' || { echo "wheel-figures: $V/ddprun is not the launcher itself" >&2; exit 1; }
# The console script pip writes for an entry point `ddprun = ddprun._launch:main`.
cat >"$tmp/console-script" <<PY
#!$V/python
import re
import sys
from ddprun._launch import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\.pyw|\.exe)?$", "", sys.argv[0])
    sys.exit(main())
PY
chmod +x "$tmp/console-script"
printf '#include <iostream>\nint main() { std::cout << "hello\\n"; }\n' >"$tmp/hello.cpp"
g++ -O2 -static-libstdc++ -static-libgcc -o "$tmp/hello" "$tmp/hello.cpp"  # linked as ddprun is
hyperfine -N --warmup 20 --runs 200 --export-json "$tmp/h.json" \
  -n "\`ddprun --version\`, as installed (the launcher itself)" "$V/ddprun --version" \
  -n "\`python -m ddprun --version\`" "$V/python -m ddprun --version" \
  -n "\`--version\` through a console script (\`ddprun._launch:main\`, as before)" "$tmp/console-script --version" \
  -n "a C++ hello world, for scale" "$tmp/hello" >/dev/null
/usr/bin/python3 - "$tmp/h.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"| {r['command']} | {r['median'] * 1000:.2f} ms median ({r['min'] * 1000:.2f} to {r['max'] * 1000:.2f}) |")
PY
echo
echo "Measured by scripts/wheel-figures.sh on $(nproc) cores, $(uname -m), $(. /etc/os-release; echo "$PRETTY_NAME"), $(date -u +%Y-%m-%d), load average $(cut -d' ' -f1 /proc/loadavg) at the end."
