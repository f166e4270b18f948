#!/usr/bin/env bash
# The aarch64 wheel (issue 40), built here by cross-compiling (scripts/build-wheel.sh --arch
# aarch64): its ELF files need no GLIBC_ version above 2.28 and nothing but glibc, as auditwheel
# agrees (scripts/check-wheel.py); its launcher runs under qemu-user with Debian's aarch64 glibc
# (qemu-user-static, libc6-arm64-cross): --version, and a 2-worker job whose rank 1 fails in the
# first attempt and which the restart completes. The workers are shell scripts of this machine:
# qemu-user hands the launcher's execve of an x86_64 program to the kernel.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
: "${TORCH_PYTHON:?}"
qemu=$(command -v qemu-aarch64-static || true)
[[ -n $qemu ]] || skip "no qemu-aarch64-static (Debian: qemu-user-static; scripts/install-deps.sh)"
sysroot=/usr/aarch64-linux-gnu
[[ -e $sysroot/lib/ld-linux-aarch64.so.1 ]] || skip "no aarch64 glibc in $sysroot (Debian: libc6-arm64-cross; scripts/install-deps.sh)"

PYTHON=$TORCH_PYTHON bash "$DDPRUN_SOURCE_DIR/scripts/build-wheel.sh" --arch aarch64 "$T/dist" >"$T/build.log" 2>&1 \
  || { cat "$T/build.log"; fail "the aarch64 wheel did not build"; }
wheels=("$T"/dist/*.whl)
expect_eq "${#wheels[@]}" 1 "wheels built"
wheel=$(basename "${wheels[0]}")
[[ "$wheel" =~ ^ddprun-[0-9.]+-py3-none-manylinux_2_28_aarch64\.whl$ ]] || fail "unexpected wheel name $wheel"
"$TORCH_PYTHON" "$DDPRUN_SOURCE_DIR/scripts/check-wheel.py" "${wheels[0]}" >"$T/check.log" 2>&1 \
  || { cat "$T/check.log"; fail "$wheel is not manylinux_2_28"; }
ok "built $wheel: glibc 2.28 at most, nothing but glibc, auditwheel agrees: $(tail -1 "$T/check.log")"

"$TORCH_PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "${wheels[0]}" "$T/unpacked"
launchers=("$T"/unpacked/ddprun-*.data/scripts/ddprun)  # pip installs it as the environment's bin/ddprun
launcher=${launchers[0]}
[[ -f $launcher ]] || fail "no launcher in the wheel's scripts folder"
chmod +x "$launcher"
[[ "$(od -An -tx1 -j18 -N2 "$launcher" | tr -d ' ')" == b700 ]] || fail "$launcher is not an aarch64 program"
aarch64() { QEMU_LD_PREFIX=$sysroot "$qemu" "$launcher" "$@"; }
version=$(sed -nE 's/^project\(ddprun VERSION ([0-9.]+).*/\1/p' "$DDPRUN_SOURCE_DIR/CMakeLists.txt")
expect_eq "$(aarch64 --version)" "ddprun $version" "ddprun --version under qemu-aarch64"
ok "ddprun --version under qemu-aarch64"

cat >"$T/worker.sh" <<'SH'
#!/bin/sh
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then
  echo "rank 1 fails on purpose in attempt 0" >&2
  exit 3
fi
echo "rank $RANK of $WORLD_SIZE done in attempt $TORCHELASTIC_RESTART_COUNT"
SH
chmod +x "$T/worker.sh"
aarch64 --nproc_per_node=2 --max_restarts=1 "$T/worker.sh" >"$T/run.out" 2>"$T/run.err" \
  || { cat "$T/run.out" "$T/run.err"; fail "the job failed under qemu-aarch64"; }
expect_in "$T/run.err" 'rank 1 fails on purpose in attempt 0'
expect_in "$T/run.out" '^\[rank0\]: rank 0 of 2 done in attempt 1$'
expect_in "$T/run.out" '^\[rank1\]: rank 1 of 2 done in attempt 1$'
ok "a 2-worker job with a failure and a restart under qemu-aarch64"
