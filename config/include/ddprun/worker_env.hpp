// The environment contract between a launcher and its workers.
//
// These names are public API: ddprun sets them for every worker exactly as torchrun does,
// and the worker library reads them. Both sides include this header so the spelling lives
// in one place. Header-only and dependency-free on purpose (libc only): the launcher must not need libtorch.
#pragma once

#include <signal.h>

namespace ddprun::env {

// Set by the launcher for every worker (torchrun's contract).
inline constexpr const char* kRank = "RANK";                        // global rank
inline constexpr const char* kLocalRank = "LOCAL_RANK";             // rank on this node
inline constexpr const char* kGroupRank = "GROUP_RANK";             // this node's rank
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";  // workers on this node
inline constexpr const char* kWorldSize = "WORLD_SIZE";             // workers in the job
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";  // nodes in this round
inline constexpr const char* kMasterAddr = "MASTER_ADDR";           // host of global rank 0
inline constexpr const char* kMasterPort = "MASTER_PORT";           // free port there
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
// "True" when every worker, rank 0 included, is a client of the store the launcher of rank 0's
// node serves at MASTER_ADDR:MASTER_PORT (torchrun's agent store; ddprun's default); "False"
// when rank 0 of the workers hosts the store (kDisableAgentStore).
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
// Where a worker writes its uncaught error, in PyTorch's @record JSON format.
inline constexpr const char* kErrorFile = "TORCHELASTIC_ERROR_FILE";
// ddprun's own: a file private to the worker; touching it (a new modification time) says "I made
// progress". The worker library touches it at every DDP step and collective (--hang_timeout).
inline constexpr const char* kHeartbeatFile = "DDPRUN_HEARTBEAT_FILE";
// ddprun's own (--snapshot, on by default): the job's folder in memory on this node, the same for
// every worker, kept across worker deaths, restarts and rounds; a checkpoint written there (to a
// temporary name, then renamed) is read back by the next round's workers. Unset with
// --snapshot=off.
inline constexpr const char* kSnapshotDir = "DDPRUN_SNAPSHOT_DIR";
// Python's module path: ddprun puts its bootstrap folder first for Python workers (--progress).
inline constexpr const char* kPythonPath = "PYTHONPATH";
// ddprun's own, with its bootstrap: the bootstrap registers Python's faulthandler on the signal
// numbered kPythonStacksSignal, writing every thread's Python stack to kPythonStacksFile, which
// ddprun reads when the worker hangs and py-spy is absent or cannot attach.
inline constexpr const char* kPythonStacksFile = "DDPRUN_PYTHON_STACKS_FILE";
inline constexpr const char* kPythonStacksSignal = "DDPRUN_PYTHON_STACKS_SIGNAL";
// That signal: a real-time one, which neither PyTorch nor the usual job schedulers use (SLURM
// and Lightning use SIGUSR1/2). Its default action ends a process: ddprun sends it only to a
// process that has a handler for it.
inline int python_stacks_signal() { return SIGRTMIN + 6; }
// "1": the launcher serves the named pipe of torchelastic's FileTimerClient at kTimerFile
// (torchrun's names; ddprun picks the path when the user did not).
inline constexpr const char* kEnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER";
inline constexpr const char* kTimerFile = "TORCHELASTIC_TIMER_FILE";
// NCCL watchdog: tear the process down on a NCCL error or timeout instead of hanging ("1").
// PyTorch 2.2 and later read kNcclAsyncErrorHandling (and still the old name, with a deprecation
// warning); PyTorch 2.1 and earlier read only kNcclAsyncErrorHandlingOld. ddprun sets the new
// name for every worker, as torchrun does; the old one only where the worker's PyTorch reads it:
// ddprun's Python bootstrap (launcher/python_bootstrap/sitecustomize.py) sets it for torch < 2.2, the worker
// library for its libtorch < 2.2; a worker ddprun cannot look into (neither of those) gets both.
inline constexpr const char* kNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr const char* kNcclAsyncErrorHandlingOld = "NCCL_ASYNC_ERROR_HANDLING";
// --signals_to_handle: the signals torchrun's agent handles, passed on to the workers as torchrun
// does (its own process contexts read it).
inline constexpr const char* kSignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";

// Read by the launcher.
inline constexpr const char* kPythonExec = "PYTHON_EXEC";      // interpreter for .py programs
// The interpreter when PYTHON_EXEC is unset: the pip-installed `ddprun` command sets it to the
// Python it was installed with, as torchrun uses its own. Not passed on to the workers.
inline constexpr const char* kDefaultPython = "DDPRUN_DEFAULT_PYTHON";
// The py-spy that takes hung Python workers' stacks, before any other (beside ddprun, next to
// the workers' Python, in PATH): the pip-installed `ddprun` command sets it to the py-spy its
// package depends on. Not passed on to the workers.
inline constexpr const char* kPySpy = "DDPRUN_PY_SPY";
inline constexpr const char* kPetPrefix = "PET_";              // PET_<OPTION> supplies an option
// For tests only: seconds, instead of 600, of silence after progress before ddprun warns when
// --hang_timeout is off (launcher/hangs/hang_policy.hpp, kQuietWarning).
inline constexpr const char* kQuietWarningSeconds = "DDPRUN_QUIET_WARNING_SECONDS";
// SIGTERM -> SIGKILL grace period in seconds (torchrun's name, also a ddprun flag).
inline constexpr const char* kShutdownTimeout = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
// The job's rendezvous secret when --rdzv_conf secret_file is not given. Removed from the
// launcher's own environment once read: never passed on to the workers.
inline constexpr const char* kRdzvSecret = "DDPRUN_RDZV_SECRET";
// "1": no agent store; the workers get TORCHELASTIC_USE_AGENT_STORE=False (torchrun's name).
inline constexpr const char* kDisableAgentStore = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE";

// "0": ddprun makes no cgroup for its workers (launcher/process/containment.hpp), and stops
// what escapes their process groups as a child subreaper only.
inline constexpr const char* kCgroup = "DDPRUN_CGROUP";

// Given to --health_check's command (launcher/health_check.hpp): the start of this node's workers
// that follows the check (0 before the first join, as --log_dir's attempt_N), and its deadline in
// seconds (--health_check_timeout).
inline constexpr const char* kHealthCheckAttempt = "DDPRUN_HEALTH_CHECK_ATTEMPT";
inline constexpr const char* kHealthCheckTimeout = "DDPRUN_HEALTH_CHECK_TIMEOUT";

// Set by SLURM; read by ddprun (to infer its options) and by the worker library (srun without ddprun).
inline constexpr const char* kSlurmJobId = "SLURM_JOB_ID";
inline constexpr const char* kSlurmStepId = "SLURM_STEP_ID";
inline constexpr const char* kSlurmNnodes = "SLURM_NNODES";
inline constexpr const char* kSlurmNodeId = "SLURM_NODEID";
inline constexpr const char* kSlurmJobNodelist = "SLURM_JOB_NODELIST";
inline constexpr const char* kSlurmStepNodelist = "SLURM_STEP_NODELIST";
inline constexpr const char* kSlurmStepNumNodes = "SLURM_STEP_NUM_NODES";
inline constexpr const char* kSlurmGpusOnNode = "SLURM_GPUS_ON_NODE";
inline constexpr const char* kSlurmProcId = "SLURM_PROCID";
inline constexpr const char* kSlurmLocalId = "SLURM_LOCALID";
inline constexpr const char* kSlurmNtasks = "SLURM_NTASKS";
inline constexpr const char* kSlurmNtasksPerNode = "SLURM_NTASKS_PER_NODE";

}  // namespace ddprun::env
