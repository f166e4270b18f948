// Joining the job: from the launcher's environment to a working communicator.
#pragma once

#include <c10/core/DeviceType.h>

#include <memory>
#include <stdexcept>

#include "ddprun/comm.hpp"
#include "ddprun/export.hpp"
#include "ddprun/launch_env.hpp"
#include "ddprun/timeouts.hpp"

namespace ddprun {

// The ranks could not be connected: the store could not be hosted or reached, the other
// ranks did not join within the store timeout, or the requested backend is not built in.
class DDPRUN_API ProcessGroupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Environment variable: "0" turns the collective agreement checks off (default on); see
// ProcessGroupOptions::check_collectives.
inline constexpr const char* kCheckCollectivesEnv = "DDPRUN_CHECK_COLLECTIVES";

enum class Backend {
  kAuto,  // gloo for CPU tensors, NCCL for CUDA tensors
  kGloo,  // gloo for either: with kCUDA, several ranks can share one GPU (NCCL refuses that)
  kNccl,  // CUDA tensors only
};

struct DDPRUN_API ProcessGroupOptions {
  // Defaults read once from DDPRUN_STORE_TIMEOUT / DDPRUN_COLLECTIVE_TIMEOUT; a value set
  // here in code wins over the environment.
  Timeouts timeouts = Timeouts::from_env();
  // Where the collectives' tensors live. kCUDA: GPU LOCAL_RANK (with gloo: LOCAL_RANK modulo
  // the GPUs visible), which becomes the current device; needs a CUDA build of libtorch and a
  // visible GPU.
  c10::DeviceType device = c10::kCPU;
  Backend backend = Backend::kAuto;
  // Before each of the library's collectives and each DDP backward pass, the ranks exchange
  // what they are about to do (four integers) and fail with a CommError naming every rank's
  // call when they disagree (Comm::check_agreement). Costs one small all-gather per call; gloo
  // only. Default from DDPRUN_CHECK_COLLECTIVES (on unless "0").
  bool check_collectives = check_collectives_from_env();
  // World size 1 gets a communicator that opens no sockets. False makes a real process group
  // of one rank instead (to test a backend on a machine with one GPU).
  bool solo_when_alone = true;

  // DDPRUN_CHECK_COLLECTIVES: unset or "1" is true, "0" false; anything else throws
  // LaunchEnvError naming it.
  static bool check_collectives_from_env(const EnvLookup& env = process_env());
};

// Connects this process to the other ranks of the job that `env` describes:
// - standalone or world size 1: a solo communicator, no sockets;
// - TORCHELASTIC_USE_AGENT_STORE=True (ddprun, torchrun): a client of the launcher's store at
//   MASTER_ADDR:MASTER_PORT, under the prefix /worker/attempt_<TORCHELASTIC_RESTART_COUNT>;
// - otherwise rank 0 hosts a c10d TCPStore on MASTER_PORT and the other ranks connect to it.
// Returns once every rank has joined. Throws ProcessGroupError (naming the address, the rank
// and the store timeout) when that does not happen within options.timeouts.store.
DDPRUN_API std::shared_ptr<Comm> init_process_group(const LaunchEnv& env, const ProcessGroupOptions& options);

// The same, with the environment of this process. Also throws LaunchEnvError naming a
// missing or malformed variable.
DDPRUN_API std::shared_ptr<Comm> init_process_group(const ProcessGroupOptions& options = {});

}  // namespace ddprun
