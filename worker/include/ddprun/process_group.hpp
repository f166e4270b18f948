// Joining the job: from the launcher's environment to a working communicator.
#pragma once

#include <c10/core/DeviceType.h>

#include <memory>
#include <stdexcept>

#include "ddprun/comm.hpp"
#include "ddprun/launch_env.hpp"
#include "ddprun/timeouts.hpp"

namespace ddprun {

// The ranks could not be connected: the store could not be hosted or reached, the other
// ranks did not join within the store timeout, or the requested backend is not built in.
class ProcessGroupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ProcessGroupOptions {
  // Defaults read once from DDPRUN_STORE_TIMEOUT / DDPRUN_COLLECTIVE_TIMEOUT; a value set
  // here in code wins over the environment.
  Timeouts timeouts = Timeouts::from_env();
  // kCPU: gloo. kCUDA: NCCL on GPU LOCAL_RANK, which becomes the current device; needs a
  // CUDA build of libtorch.
  c10::DeviceType device = c10::kCPU;
};

// Connects this process to the other ranks of the job that `env` describes:
// - standalone or world size 1: a solo communicator, no sockets;
// - TORCHELASTIC_USE_AGENT_STORE=True (torchrun): a client of the agent's store at
//   MASTER_ADDR:MASTER_PORT, under the prefix /worker/attempt_<TORCHELASTIC_RESTART_COUNT>;
// - otherwise rank 0 hosts a c10d TCPStore on MASTER_PORT and the other ranks connect to it.
// Returns once every rank has joined. Throws ProcessGroupError (naming the address, the rank
// and the store timeout) when that does not happen within options.timeouts.store.
std::shared_ptr<Comm> init_process_group(const LaunchEnv& env, const ProcessGroupOptions& options);

// The same, with the environment of this process. Also throws LaunchEnvError naming a
// missing or malformed variable.
std::shared_ptr<Comm> init_process_group(const ProcessGroupOptions& options = {});

}  // namespace ddprun
