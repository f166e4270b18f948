// What a process started by SLURM can learn from its environment: the launcher's options when
// `srun --ntasks-per-node=1 ddprun ...` runs it without them, and a worker's identity when
// `srun --ntasks-per-node=4 ./train` runs workers with no launcher at all.
//
// Pure functions of an environment map, so every decision is tested as a table; the caller
// passes environment_from(environ). Never read: SLURM_LAUNCH_NODE_IPADDR, the address of the
// host srun was typed on, which is often a login node outside the allocation.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/user_error.hpp"

namespace ddprun::env {

// SLURM variables read here besides those in worker_env.hpp. Inside an srun step, srun sets the
// job-level names (SLURM_NODELIST, SLURM_NNODES, SLURM_NTASKS) to the step's values; the STEP_
// names are preferred anyway because they cannot be inherited from the batch script.
inline constexpr const char* kSlurmStepIdOld = "SLURM_STEPID";               // older spelling
inline constexpr const char* kSlurmNodelist = "SLURM_NODELIST";
inline constexpr const char* kSlurmJobNumNodes = "SLURM_JOB_NUM_NODES";
inline constexpr const char* kSlurmStepNumTasks = "SLURM_STEP_NUM_TASKS";
inline constexpr const char* kSlurmTasksPerNode = "SLURM_TASKS_PER_NODE";    // compressed: 2(x3),1
inline constexpr const char* kSlurmStepTasksPerNode = "SLURM_STEP_TASKS_PER_NODE";

}  // namespace ddprun::env

namespace ddprun::slurm {

using Environment = std::map<std::string, std::string>;

// A SLURM variable with a value SLURM would never set; what() names the variable and the value.
// A user error: the launcher prints it on one line and exits 64.
class SlurmEnvError : public UserError {
 public:
  using UserError::UserError;
};

// The port of the rendezvous endpoint the launcher uses when none is given (torchrun's c10d default).
inline constexpr int kDefaultRendezvousPort = 29400;
// MASTER_PORT for workers started by srun alone is kMasterPortBase + (job id % 10000), as
// PyTorch Lightning does, so every task of a job computes the same port without talking.
inline constexpr int kMasterPortBase = 15000;

// The launcher's options as SLURM implies them. The launcher fills each option the user did not
// give from here (explicit flags win) and prints `summary`.
struct SlurmInference {
  bool in_slurm = false;                   // SLURM_JOB_ID is set; all else is empty when not
  bool in_step = false;                    // started by srun (SLURM_STEP_ID set), not the batch script
  std::string job_id;                      // SLURM_JOB_ID
  std::optional<std::string> step_id;      // SLURM_STEP_ID
  std::optional<int> nnodes;               // nodes of the step (of the job outside a step)
  std::optional<int> node_rank;            // SLURM_NODEID: this node's index in that node list
  std::optional<std::string> master_addr;  // first host of the step's node list, else the job's
  std::optional<std::string> run_id;       // "<job id>.<step id>", or the job id outside a step
  std::optional<int> gpus_on_node;         // SLURM_GPUS_ON_NODE: GPUs SLURM gave this node
  // Set when SLURM's layout gives this ddprun no node rank: several ddprun tasks per node, or a
  // multi-node job's batch script running ddprun outside srun. nnodes and node_rank are then
  // empty, and the launcher must refuse to start (usage error, this text) unless --nnodes and
  // --node_rank were given explicitly.
  std::optional<std::string> layout_error;
  // One line for the launcher to print (empty outside SLURM), e.g.
  // "ddprun: SLURM job 123 step 0: 2 nodes, node rank 1, rendezvous at n1:29400, run id 123.0"
  std::string summary;
};

// Infers the launcher's options from SLURM's variables; {in_slurm = false} outside SLURM.
// Inside an srun step the step's variables win over the job's. Throws SlurmEnvError when a
// variable it needs is malformed or the variables contradict each other (node rank outside the
// node list, node count different from the list's length).
SlurmInference infer_from_slurm(const Environment& env);

// The summary line for `inference` with the rendezvous endpoint the launcher actually uses
// (infer_from_slurm fills `summary` with master_addr:kDefaultRendezvousPort); "" outside SLURM.
std::string describe(const SlurmInference& inference, std::string_view rendezvous_endpoint);

// A worker's place in the job when srun started every worker itself (no launcher).
struct WorkerIdentity {
  int rank = 0;              // SLURM_PROCID
  int local_rank = 0;        // SLURM_LOCALID
  int world_size = 1;        // tasks in the step
  int local_world_size = 1;  // tasks of the step on this node
  int group_rank = 0;        // SLURM_NODEID
  int group_world_size = 1;  // nodes in the step
  std::string master_addr;   // MASTER_ADDR if set, else the first host of the step's node list
  int master_port = 0;       // MASTER_PORT if set, else master_port_for_job(SLURM_JOB_ID)
  std::string run_id;        // "<job id>.<step id>"
};

// The worker's identity when the environment is an srun step's task (SLURM_JOB_ID, SLURM_STEP_ID
// and SLURM_PROCID set); nullopt otherwise, e.g. in a batch script, which is one process however
// many tasks the job has. The worker library calls this only when the launcher's variables
// (RANK, WORLD_SIZE, ...) are absent. Rank 0 is on the first node of the step for SLURM's block
// and cyclic distributions, which master_addr assumes. Throws SlurmEnvError as infer_from_slurm.
std::optional<WorkerIdentity> worker_identity_from_slurm(const Environment& env);

// Expands SLURM's compressed per-node counts: "2(x3),1" -> {2, 2, 2, 1}.
// Throws SlurmEnvError, naming `variable`, when `counts` is not in that form.
std::vector<int> expand_tasks_per_node(std::string_view counts, std::string_view variable);

// kMasterPortBase + the job id's last four digits. Throws SlurmEnvError if `job_id` is not a number.
int master_port_for_job(std::string_view job_id);

// The NAME=VALUE entries of a null-terminated array such as `environ`, as a map.
Environment environment_from(const char* const* envp);

}  // namespace ddprun::slurm
