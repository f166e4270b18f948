#!/usr/bin/env bash
# ddprun inside a parent project (issue 14): add_subdirectory and FetchContent both configure
# and generate, the parent's program links ddprun::worker (Torch's targets must be visible to
# the parent), none of ddprun's tests or examples come along, and DDPRUN_LAUNCHER=OFF drops the
# launcher and its dependencies. The builds themselves are dry runs: compiling the library
# again would add minutes, and tests/package/consumer_test.sh builds a real consumer.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

configure() {  # NAME CMAKE-ARGS...
  local name=$1; shift
  cmake -S "$DDPRUN_TESTS_DIR/package/parent" -B "$T/$name" -G Ninja -DDDPRUN_SOURCE="$DDPRUN_SOURCE_DIR" \
    -DCMAKE_PREFIX_PATH="${DDPRUN_TORCH_PREFIX_PATH//:/;}" "$@" >"$T/$name.log" 2>&1 \
    || { cat "$T/$name.log"; fail "$name: the parent project did not configure"; }
  ninja -C "$T/$name" -n consumer >"$T/$name.plan" 2>&1 \
    || { cat "$T/$name.plan"; fail "$name: the parent cannot build its consumer"; }
  expect_in "$T/$name.plan" 'Linking CXX executable consumer'
  # The list goes to a file first: `grep -q` leaves early, and with pipefail the SIGPIPE of a long
  # list would fail the pipeline.
  ninja -C "$T/$name" -t targets all >"$T/$name.targets"
  ! grep -E '^(train|rank_driver|worker_unit_test|launcher_unit_tests|bench_ddp):' "$T/$name.targets" \
    || fail "$name: ddprun's tests or examples are part of the parent's build"
  [[ -z "$(ctest --test-dir "$T/$name" -N | grep -E '^ +Test +#')" ]] || fail "$name: ddprun registered tests in the parent"
}

configure subdirectory
grep -q '^ddprun:' "$T/subdirectory.targets" || fail "the launcher is not built by default"
ok "add_subdirectory: the parent links ddprun::worker; no tests or examples"

configure fetchcontent -DPARENT_FETCHCONTENT=ON -DFETCHCONTENT_SOURCE_DIR_DDPRUN="$DDPRUN_SOURCE_DIR"
ok "FetchContent: the same"

configure library_only -DDDPRUN_LAUNCHER=OFF
! ninja -C "$T/library_only" -t targets all | grep -E '^(ddprun|ddprun_launcher|ddprun_elastic):' \
  || fail "DDPRUN_LAUNCHER=OFF still builds the launcher"
! grep -q '^CLI11_DIR:' "$T/library_only/CMakeCache.txt" || fail "DDPRUN_LAUNCHER=OFF still looks for CLI11"
ok "DDPRUN_LAUNCHER=OFF: the worker library alone, without the launcher's dependencies"
