// The differences between libtorch 1.x (Debian's 1.13) and 2.x c10d that this library
// touches, in one place. Everything else uses only the API common to both.
#pragma once

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace ddprun::compat {

// The class the gloo and NCCL process groups derive from and whose virtual collectives we
// call: c10d::ProcessGroup in 1.x; in 2.x ProcessGroup became a dispatcher wrapper and the
// backends derive from c10d::Backend.
#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

}  // namespace ddprun::compat
