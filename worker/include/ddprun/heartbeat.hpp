// Progress heartbeats for ddprun's hang detection (ddprun --hang_timeout). ddprun gives each
// worker a file of its own in DDPRUN_HEARTBEAT_FILE; a new modification time on it means "this
// worker made progress". The library beats by itself when each collective starts and when each
// synchronised DDP backward pass starts and ends, so a training loop needs nothing more. Call
// heartbeat() yourself in long phases without collectives (evaluation on one rank, a long save)
// so that they are not taken for a hang.
//
// The library also keeps the file's progress record (ddprun/progress_record.hpp): its steps,
// which ddprun shows (/status, a hang's "last step"), and the collective the rank is in, which
// names the rank the others wait for when a job hangs. DistributedDataParallel counts a step at
// the end of each synchronised backward pass; a program without it calls step() once an
// iteration.
#pragma once

#include "ddprun/export.hpp"

namespace ddprun {

// Touches DDPRUN_HEARTBEAT_FILE (one utimensat call, about a microsecond); does nothing when the
// variable is unset (no ddprun, or an older one). Never throws.
DDPRUN_API void heartbeat() noexcept;

// One step of training done: counted in the progress record (a memory write, no system call),
// and a beat. Does nothing without DDPRUN_HEARTBEAT_FILE. Never throws. DistributedDataParallel
// calls it after each synchronised backward pass: do not call it too in a program that uses it.
DDPRUN_API void step() noexcept;

}  // namespace ddprun
