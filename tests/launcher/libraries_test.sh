#!/usr/bin/env bash
# ddprun maps only what a C hello world maps (issue 25: every library the launcher links costs
# every start of every job): its ELF needs libc and the loader, and with a shared libstdc++
# (-DDDPRUN_STATIC_LIBSTDCXX=OFF, argument 1) also libstdc++, libgcc_s and libm. What a run may
# not use (libcurl for etcd, libcrypto for a secret, libmunge) is opened at run time, not needed.
# A library that comes back (libm did, through one std::ldexp) fails here, naming it.
set -euo pipefail
source "$DDPRUN_TESTS_DIR/lib.sh"
static_libstdcxx=${1:?usage: libraries_test.sh STATIC_LIBSTDCXX (ON or OFF)}
command -v readelf >/dev/null || skip "no readelf (binutils)"
needed=$(readelf -d "$DDPRUN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p')
[[ -n $needed ]] || fail "readelf found no NEEDED entry in $DDPRUN"
allowed=" libc.so.6 "
[[ $static_libstdcxx == ON ]] || allowed+="libstdc++.so.6 libgcc_s.so.1 libm.so.6 "
for lib in $needed; do
  [[ $lib == ld-linux*.so.* || $allowed == *" $lib "* ]] ||
    fail "ddprun needs $lib (all: $(echo $needed)); only$allowed and the loader are expected with DDPRUN_STATIC_LIBSTDCXX=$static_libstdcxx"
done
ok "ddprun needs $(echo $needed) (DDPRUN_STATIC_LIBSTDCXX=$static_libstdcxx)"
