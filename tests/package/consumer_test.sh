#!/usr/bin/env bash
# A user's project built against the installed ddprun (issue 14): `cmake --install` into a
# temporary prefix, which is then moved (the package must be relocatable); the consumer in this
# folder finds it with find_package(ddprun) alone, and trains on 2 ranks under the installed
# ddprun. Also: nothing in the package points into the source or build tree, no private
# dependency reaches the consumer, and a shared library exports only ddprun's public API.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"

cmake --install "$DDPRUN_BUILD_DIR" --prefix "$T/staging" >"$T/install.log"
mv "$T/staging" "$T/prefix"
P=$T/prefix

for tree in "$DDPRUN_SOURCE_DIR" "$DDPRUN_BUILD_DIR" "$T/staging"; do
  if grep -rlF "$tree" "$P/lib/cmake" "$P/include"; then fail "the installed package refers to $tree"; fi
done
if grep -rlE '#include [<"](fmt|nlohmann|CLI|asio|ddprun/(slurm_env|worker_env|hostlist|exit_codes|launch_config))' "$P/include"; then
  fail "a public header includes a private dependency"
fi
ok "the package is relocatable and its headers are public ones only"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$DDPRUN_TESTS_DIR/package/consumer" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$P;${DDPRUN_TORCH_PREFIX_PATH//:/;}" "${launcher[@]}" >"$T/configure.log" 2>&1 \
  || { cat "$T/configure.log"; fail "find_package(ddprun) failed"; }
ninja -C "$T/build" >"$T/build.log" 2>&1 || { cat "$T/build.log"; fail "the consumer did not build"; }
link_line=$(ninja -C "$T/build" -t commands consumer | tail -1)
for private in fmt nlohmann ddprun_slurm ddprun_contract; do
  [[ "$link_line" != *"$private"* ]] || fail "the consumer's link line names $private: $link_line"
done
ok "built with find_package(ddprun) and ddprun::worker"

"$P/bin/ddprun" --nproc_per_node=2 "$T/build/consumer" >"$T/run.out" 2>"$T/run.err" \
  || { cat "$T/run.out" "$T/run.err"; fail "the consumer failed under the installed ddprun"; }
expect_in "$T/run.out" '^\[rank0\]: identical [0-9.]+$'
ok "2 ranks under the installed ddprun end with identical parameters"

shared=$(find "$P/lib" -name 'libddprun_worker.so*' -type f | head -1)
if [[ -n "$shared" ]]; then
  # Everything a shared library defines: ddprun's own symbols (functions, and the typeinfo and
  # vtables of its exported classes), never libtorch's or the standard library's instantiations.
  nm -D --defined-only --demangle "$shared" | awk '{ $1 = ""; $2 = ""; print substr($0, 3) }' >"$T/symbols"
  grep -vE '^((typeinfo|typeinfo name|vtable) for )?ddprun::' "$T/symbols" >"$T/foreign" || true
  [[ ! -s "$T/foreign" ]] || { head -20 "$T/foreign"; fail "$shared exports $(wc -l <"$T/foreign") symbols outside ddprun::"; }
  expect_in "$T/symbols" '^ddprun::init_process_group\('
  ok "$(basename "$shared") exports $(wc -l <"$T/symbols") symbols, all in ddprun::"
else
  ok "static library: no exported symbols to check"
fi
