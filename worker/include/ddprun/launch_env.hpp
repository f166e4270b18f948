// What a launcher (ddprun, torchrun, or a user exporting variables by hand) tells a worker
// through its environment: who it is, how many there are, and where to meet.
//
// Parsing is a pure function of a variable lookup, so every rule below is tested as a table
// without touching the real environment.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "ddprun/export.hpp"

namespace ddprun {

// A missing or malformed launcher variable. `variable()` names it; what() says what was
// found and what was expected.
class DDPRUN_API LaunchEnvError : public std::runtime_error {
 public:
  LaunchEnvError(std::string variable, const std::string& message);
  const std::string& variable() const { return variable_; }

 private:
  std::string variable_;
};

// Returns the value of an environment variable, or nothing when it is unset.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// The process's real environment (getenv).
DDPRUN_API EnvLookup process_env();

struct LaunchEnv {
  // False when none of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT is set: the program was
  // started alone and runs as world size 1 without opening sockets.
  bool launched = false;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  std::uint16_t master_port = 0;
  // Which attempt this is (0 on the first start, +1 per restart of the job).
  int restart_count = 0;
  // The launcher (ddprun, torchrun's agent) hosts the store at MASTER_ADDR:MASTER_PORT and every
  // worker, rank 0 included, connects to it as a client under the prefix
  // /worker/attempt_<restart_count>.
  bool use_agent_store = false;
};

// Reads the variables ddprun and torchrun give their workers (docs/reference/environment.md, "What each worker gets").
// - None of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set: a standalone LaunchEnv.
// - Otherwise all four are required; RANK in [0, WORLD_SIZE), MASTER_PORT in [1, 65535].
// - LOCAL_RANK and LOCAL_WORLD_SIZE are optional and default to RANK and WORLD_SIZE (one
//   node, as when a user exports the four variables by hand).
// - TORCHELASTIC_RESTART_COUNT defaults to 0; TORCHELASTIC_USE_AGENT_STORE is "True" or
//   "False" (torchrun's spelling), unset meaning False.
// Throws LaunchEnvError naming the first missing or malformed variable.
DDPRUN_API LaunchEnv parse_launch_env(const EnvLookup& env);

// This process's place in the job: the launcher's variables, as parse_launch_env(process_env())
// reads them; or, when there are none and srun started every worker itself
// (srun --ntasks-per-node=4 ./train), SLURM's: SLURM_PROCID, SLURM_LOCALID, the step's task
// count, MASTER_ADDR from the step's first host and MASTER_PORT from the job id (both unless
// set). Throws LaunchEnvError, or slurm::SlurmEnvError for a malformed SLURM variable.
DDPRUN_API LaunchEnv launch_env_from_process();

// Parses a positive duration in seconds ("300", "1.5") read from `variable`; throws
// LaunchEnvError naming it when `text` is not a finite number > 0.
DDPRUN_API double parse_seconds(const char* variable, const std::string& text);

// Makes stdout line-buffered. Under a launcher it is a pipe, which C and C++ buffer in
// blocks: the last lines of a worker that is killed would be lost, and ranks' lines would reach
// the launcher in bursts. run_main() and init_process_group() call it first thing; call it
// yourself if your program prints before either. Cheap enough to call more than once.
DDPRUN_API void line_buffer_stdout();

}  // namespace ddprun
