#!/usr/bin/env bash
# pip building ddprun from its sdist (issue 40: where no wheel fits) on a machine that lacks what
# the build needs stops with one line naming what is missing and the packages that bring it
# (cmake/SourceBuildNeeds.cmake), instead of CMake's page per package: configured as
# scikit-build-core configures it (SKBUILD), in a mount namespace that hides the headers, then
# one that hides the compilers.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
[[ $(id -u) -eq 0 ]] || skip "hiding headers and compilers takes a mount namespace: run as root"

# configure HIDE...: CMake's configure as pip's build would run it, with each HIDE (a folder: an
# empty read-only tmpfs over it; a program: /dev/null, which cannot run, over it) hidden.
configure() {
  rm -rf "$T/build"
  unshare -m bash -c '
    for hide in "${@:2}"; do
      if [[ -d $hide ]]; then mount -t tmpfs -o ro none "$hide"; else mount --bind /dev/null "$hide"; fi
    done
    env -u CXX cmake -S "$1" -B "$0" -G Ninja -DSKBUILD=ON -DSKBUILD_SCRIPTS_DIR="$0/scripts" \
      -DSKBUILD_DATA_DIR="$0/data" -DDDPRUN_WORKER=OFF -DDDPRUN_BUILD_TESTS=OFF' \
    "$T/build" "$DDPRUN_SOURCE_DIR" "$@"
}

set +e
configure /usr/include >"$T/headers.out" 2>&1
rc=$?
set -e
(( rc != 0 )) || { cat "$T/headers.out"; fail "configured without /usr/include"; }
needs='^ +ddprun: building from source needs the headers of fmt \(libfmt-dev\), nlohmann_json \(nlohmann-json3-dev\), Asio \(libasio-dev\), curl \(libcurl4-openssl-dev\) \(Debian package names\); pip normally installs the manylinux_2_28 wheel instead, see docs/install.md$'
expect_in "$T/headers.out" "$needs"
expect_eq "$(grep -c 'ddprun:' "$T/headers.out")" 1 "lines from ddprun"
ok "without the headers: one line naming each missing library and its package"

compilers=()
for c in c++ g++ clang++; do
  p=$(command -v "$c") && compilers+=("$(readlink -f "$p")")
done
(( ${#compilers[@]} > 0 )) || skip "no C++ compiler here to hide"
set +e
configure "${compilers[@]}" >"$T/compiler.out" 2>&1
rc=$?
set -e
(( rc != 0 )) || { cat "$T/compiler.out"; fail "configured with every compiler hidden"; }
expect_in "$T/compiler.out" '^ +ddprun: building from source needs a C\+\+17 compiler \(none of c\+\+, g\+\+, clang\+\+ found; Debian: build-essential\); pip normally installs the manylinux_2_28 wheel instead, see docs/install.md$'
expect_eq "$(grep -c 'ddprun:' "$T/compiler.out")" 1 "lines from ddprun"
ok "without a compiler: one line saying so, before CMake's own search"
