#!/usr/bin/env bash
# Configures and builds ddprun (launcher, worker library, example train, tests).
#   scripts/build.sh [extra cmake -D options]            against Debian's libtorch 1.13, in build/
#   scripts/build.sh --main [extra cmake -D options]     the same build/ with the tests off
#       (DDPRUN_BUILD_TESTS=OFF): only ddprun and the example train, what scripts/run-main.sh runs
#       and `scripts/install-deps.sh --main` installs for; a later plain build.sh turns them on again
#   scripts/build.sh --torch2 [extra cmake -D options]   against PyTorch 2.x from the venv that
#       `scripts/install-deps.sh --torch2` makes, in build-torch2/; registers only the worker
#       library's tests (the launcher's do not depend on libtorch and run in build/), with the
#       worker library shared (build/ has it static: CI builds and installs both kinds)
#   scripts/build.sh --fuzz [extra cmake -D options]     with clang, ASan and UBSan, no libtorch, in
#       build-fuzz/: the libFuzzer targets (tests/fuzz), ddprun and the launcher/config/elastic/SLURM
#       unit tests, nothing else
# DDPRUN_BUILD_DIR / DDPRUN_TORCH2_BUILD_DIR / DDPRUN_FUZZ_BUILD_DIR override the folders;
# DDPRUN_JOBS the parallel jobs (default: cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
options=()
targets=()  # none: all
if [[ "${1:-}" == "--main" ]]; then
  shift
  build=${DDPRUN_BUILD_DIR:-$root/build}
  options=(-DDDPRUN_BUILD_TESTS=OFF)
  targets=(ddprun train)
elif [[ "${1:-}" == "--torch2" ]]; then
  shift
  source "$root/scripts/torch2-env.sh"
  [[ -x "$TORCH2_PYTHON" ]] || { echo "build: no $TORCH2_PYTHON; run scripts/install-deps.sh --torch2" >&2; exit 1; }
  build=${DDPRUN_TORCH2_BUILD_DIR:-$root/build-torch2}
  options=(-DCMAKE_PREFIX_PATH="$(torch2_cmake_prefix_path)" -DDDPRUN_TORCH_PYTHON="$TORCH2_PYTHON"
           -DDDPRUN_LAUNCHER_TESTS=OFF -DBUILD_SHARED_LIBS=ON)
elif [[ "${1:-}" == "--fuzz" ]]; then
  shift
  command -v clang++ >/dev/null || { echo "build: --fuzz needs clang++; run scripts/install-deps.sh" >&2; exit 1; }
  build=${DDPRUN_FUZZ_BUILD_DIR:-$root/build-fuzz}
  # -O1 with line tables only: sanitizer reports keep their file:line, and the tree builds in
  # a fraction of RelWithDebInfo's time.
  options=(-DCMAKE_CXX_COMPILER=clang++ -DDDPRUN_WORKER=OFF -DDDPRUN_FUZZ=ON
           "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only")
  targets=(fuzz ddprun config_unit_tests launcher_unit_tests elastic_core_test elastic_unit_test slurm_hostlist_test
           slurm_hostlist_scontrol_test slurm_env_test)
else
  build=${DDPRUN_BUILD_DIR:-$root/build}
  options=(-DDDPRUN_BUILD_TESTS=ON)  # on again where --main turned them off
fi
# ccache: build-torch2/ compiles config/, elastic/ and the launcher with the very commands build/
# does, but in another folder, which ccache puts in the hash of a -g compilation unless told
# not to: then they come from the cache (the debug info's compilation folder is then the first
# build's, in the same tree, so debuggers still find the sources). BASEDIR: paths relative to the
# clone, so that a second clone hits the first's cache.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${options[@]}" "$@" >/dev/null
ninja -C "$build" -j "${DDPRUN_JOBS:-$(nproc)}" "${targets[@]}"
