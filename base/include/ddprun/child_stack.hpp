// DDPRUN_CHILD_STACK marks a function that a child of clone_vfork (launcher/process/clone_vfork.hpp)
// runs on its own stack, between its birth and its exec: AddressSanitizer, which does not know
// that stack, would warn at each call that does not return ("ignoring requested
// __asan_handle_no_return") and might report false errors after it. Here, not in clone_vfork.hpp,
// because clocks.hpp's monotonic_ns() is such a function.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define DDPRUN_CHILD_STACK __attribute__((no_sanitize("address")))
#else
#define DDPRUN_CHILD_STACK
#endif
