// NCCL's async error handling under the name this library's libtorch reads
// (config/include/ddprun/worker_env.hpp): ddprun gives a program it cannot look into both names,
// and PyTorch 2.2 and later warn about the old one. Called before a NCCL process group is made.
#pragma once

#include <cstdlib>

#include "ddprun/worker_env.hpp"

namespace ddprun::detail {

// libtorch `major`.`minor` >= 2.2: the old name's value moves to the new name when that is unset,
// and the old name goes (the new one is read first, so nothing the user meant is lost); before
// 2.2: the old name, when unset, takes the new name's value.
inline void use_nccl_async_error_handling_of(int major, int minor) {
  const char* current = std::getenv(env::kNcclAsyncErrorHandling);
  const char* old = std::getenv(env::kNcclAsyncErrorHandlingOld);
  if (major > 2 || (major == 2 && minor >= 2)) {
    if (old == nullptr) return;
    if (current == nullptr) ::setenv(env::kNcclAsyncErrorHandling, old, 1);
    ::unsetenv(env::kNcclAsyncErrorHandlingOld);
  } else if (old == nullptr && current != nullptr) {
    ::setenv(env::kNcclAsyncErrorHandlingOld, current, 1);
  }
}

}  // namespace ddprun::detail
