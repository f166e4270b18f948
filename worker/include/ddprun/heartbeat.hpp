// Progress heartbeats for ddprun's hang detection (ddprun --hang_timeout). ddprun gives each
// worker a file of its own in DDPRUN_HEARTBEAT_FILE; a new modification time on it means "this
// worker made progress". The library beats by itself when each collective starts and when each
// synchronised DDP backward pass starts and ends, so a training loop needs nothing more. Call
// heartbeat() yourself in long phases without collectives (evaluation on one rank, a long save)
// so that they are not taken for a hang.
#pragma once

#include "ddprun/export.hpp"

namespace ddprun {

// Touches DDPRUN_HEARTBEAT_FILE (one utimensat call, about a microsecond); does nothing when the
// variable is unset (no ddprun, or an older one). Never throws.
DDPRUN_API void heartbeat() noexcept;

}  // namespace ddprun
