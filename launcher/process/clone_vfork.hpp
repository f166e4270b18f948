// A child that shares ddprun's memory until it execs, as posix_spawn makes it, but that can
// also start in a given cgroup, which glibc's posix_spawn learned only in 2.39.
#pragma once

#include <sys/types.h>

#include "ddprun/child_stack.hpp"  // DDPRUN_CHILD_STACK, for what the child runs

namespace ddprun::launcher {

// Runs child(arg) in a new process made with CLONE_VM | CLONE_VFORK, on a stack of its own,
// and returns its pid once the child has exec'd or exited, as vfork does. With
// cgroup_dir_fd >= 0 the child starts in that cgroup (clone3's CLONE_INTO_CGROUP, x86-64
// only: elsewhere -1 with ENOSYS); else glibc's clone makes it, on every architecture.
// Returns -1 with errno when the kernel (or a seccomp filter) refuses: the caller forks then.
//
// The calling thread is suspended until the child execs, with every signal blocked; its
// memory is the child's, so the child may only make system calls on data prepared before (no
// allocation, no locks, no writes the parent would see). Its return value is its exit status.
//
// Why: a fork write-protects every page of ddprun for copy-on-write and copies its page
// tables, then ddprun faults on each page it writes next. For 8 workers that was 2.2 ms of
// ddprun's CPU in a start of 10 ms (perf stat), which posix_spawn does not pay.
pid_t clone_vfork(int (*child)(void*), void* arg, int cgroup_dir_fd);

}  // namespace ddprun::launcher
