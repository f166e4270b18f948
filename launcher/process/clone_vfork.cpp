#include "process/clone_vfork.hpp"

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>

// GCC's and Debian clang's; zig's clang (the wheels' compiler) has no sanitizer headers, and
// without ASan the macro is a no-op anyway.
#if __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#ifndef ASAN_UNPOISON_MEMORY_REGION
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#endif

#if defined(__x86_64__) && defined(SYS_clone3) && defined(CLONE_INTO_CGROUP)
#define DDPRUN_HAVE_CLONE3_CALL 1

// clone3 with a stack for the child, which then calls child(arg) and exits with its result.
// In assembly because the child starts on the new stack: a C function that made the system
// call would return through a frame that is not there. The kernel keeps every register but
// rax, rcx and r11 across a system call, and copies them to the child, so child and arg wait
// in r8 and r9. Returns the child's pid, or -errno, to the parent.
extern "C" long ddprun_clone3_call(clone_args* args, std::size_t size, int (*child)(void*), void* arg);
asm(R"(
    .text
    .globl ddprun_clone3_call
    .hidden ddprun_clone3_call
    .type ddprun_clone3_call, @function
ddprun_clone3_call:
    .cfi_startproc
    mov %rdx, %r8
    mov %rcx, %r9
    mov $435, %eax
    syscall
    test %rax, %rax
    jz 1f
    ret
1:
    .cfi_undefined rip
    xor %ebp, %ebp
    mov %r9, %rdi
    call *%r8
    mov %eax, %edi
    mov $60, %eax
    syscall
    hlt
    .cfi_endproc
    .size ddprun_clone3_call, .-ddprun_clone3_call
)");
static_assert(SYS_clone3 == 435 && SYS_exit == 60, "the assembly above names these numbers");
#endif

namespace ddprun::launcher {
namespace {

// The child's stack: execvpe and a few calls before it. Made for each child: spawns are rare,
// and a stack shared between two threads spawning at once would be corrupted.
constexpr std::size_t kStackSize = 256 * 1024;

class ChildStack {
 public:
  ChildStack() {
    void* p = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : p;
  }
  ~ChildStack() {
    if (base_ == nullptr) return;
    // The child exec'd out of its functions: under AddressSanitizer, their frames' redzones
    // stay poisoned for whatever is mapped here next. (Nothing, in other builds.)
    ASAN_UNPOISON_MEMORY_REGION(base_, kStackSize);
    ::munmap(base_, kStackSize);
  }
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  void* base() const { return base_; }

 private:
  void* base_ = nullptr;
};

// Every signal blocked in this thread until the child has exec'd: a handler that ran in the
// child would run on ddprun's memory. The child sets its own mask before it execs.
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~AllSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  AllSignalsBlocked(const AllSignalsBlocked&) = delete;
  AllSignalsBlocked& operator=(const AllSignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

// clone3 into the cgroup, with the child on `stack`: the child's pid, or -1 with errno.
pid_t clone3_into_cgroup(int (*child)(void*), void* arg, int cgroup_dir_fd, void* stack) {
#ifdef DDPRUN_HAVE_CLONE3_CALL
  clone_args args{};
  args.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
  args.cgroup = static_cast<__u64>(cgroup_dir_fd);
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<__u64>(stack);
  args.stack_size = kStackSize;
  const long result = ddprun_clone3_call(&args, sizeof args, child, arg);
  if (result >= 0) return static_cast<pid_t>(result);
  errno = static_cast<int>(-result);
#else
  (void)child, (void)arg, (void)cgroup_dir_fd, (void)stack;
  errno = ENOSYS;
#endif
  return -1;
}

}  // namespace

pid_t clone_vfork(int (*child)(void*), void* arg, int cgroup_dir_fd) {
  const ChildStack stack;
  if (stack.base() == nullptr) return -1;  // errno from mmap
  const AllSignalsBlocked blocked;
  if (cgroup_dir_fd >= 0) return clone3_into_cgroup(child, arg, cgroup_dir_fd, stack.base());
  // glibc's clone, on every architecture (the stack grows down on all that Linux runs ddprun on).
  return ::clone(child, static_cast<char*>(stack.base()) + kStackSize, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
}

}  // namespace ddprun::launcher
