// The environment each worker starts with: ddprun's own, plus torchrun's contract.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"

namespace ddprun::launcher {

// The worker's own files, made by ddprun; "" for one it does not have.
struct WorkerFiles {
  std::string error_file;      // TORCHELASTIC_ERROR_FILE
  std::string heartbeat_file;  // DDPRUN_HEARTBEAT_FILE
  std::string timer_file;      // TORCHELASTIC_TIMER_FILE (with TORCHELASTIC_ENABLE_FILE_TIMER=1)
  std::string python_bootstrap;  // first on PYTHONPATH: python_bootstrap_folder(), for Python workers
  std::string python_stacks;     // DDPRUN_PYTHON_STACKS_FILE, with the bootstrap (hangs/python_stacks.hpp)
  std::string snapshot_dir;      // DDPRUN_SNAPSHOT_DIR, the job's (snapshots/snapshot_dir.hpp); "": --snapshot=off
};

// The folder of ddprun's sitecustomize.py (launcher/python_bootstrap/), beside the running executable:
// <prefix>/share/ddprun/python for <prefix>/bin/ddprun, installed or in the build tree; "" when
// it is not there.
std::string python_bootstrap_folder();

// `base` is ddprun's environment. Sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT and the
// rest of the names in ddprun/worker_env.hpp; OMP_NUM_THREADS=1 when unset and more than one
// worker runs on this node; TORCH_NCCL_ASYNC_ERROR_HANDLING inherited, else its old name
// NCCL_ASYNC_ERROR_HANDLING's inherited value, else 1, and the old name (inherited, else the same
// value) only without files.python_bootstrap, which sets it for torch < 2.2 itself;
// TORCHELASTIC_SIGNALS_TO_HANDLE; with --virtual_local_rank LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES
// the worker's own GPU; files.python_bootstrap, if any, first on PYTHONPATH (its sitecustomize
// takes it off again), and with it files.python_stacks and the signal that asks for them;
// DDPRUN_SNAPSHOT_DIR files.snapshot_dir, and none (not an inherited one) without it.
std::vector<std::string> worker_environment(const std::map<std::string, std::string>& base,
                                            const config::LaunchConfig& config,
                                            const elastic::RoundAssignment& round, int local_rank,
                                            const WorkerFiles& files);

// The environment of the warm interpreter (--warm_start, zygote.hpp): `base` without what
// worker_environment() takes out, with what it adds for every worker alike that a program may read
// at import (OMP_NUM_THREADS) and `python_bootstrap`, if any, first on PYTHONPATH, so that the
// zygote's imports see what a cold worker's would, and DDPRUN_SNAPSHOT_DIR as worker_environment()
// sets it (the job's, the same for every worker). The per-rank variables are each worker's own.
std::vector<std::string> zygote_environment(const std::map<std::string, std::string>& base,
                                            const config::LaunchConfig& config, const std::string& python_bootstrap,
                                            const std::string& snapshot_dir);

// The option among an interpreter's arguments `args` (those before its script, -c or -m) that
// keeps ddprun's bootstrap out of it: 'I' (isolated: -E and -s), 'E' (PYTHONPATH ignored) or 'S'
// (no `site`, so no sitecustomize); 0 when none. Options may be combined ("-uI").
char python_option_without_bootstrap(const std::vector<std::string>& args);
// The line ddprun says once for that option: what the workers lose.
std::string without_bootstrap_line(char option);

// True when ddprun sets OMP_NUM_THREADS=1 for its workers (it says so once, as torchrun does).
bool sets_omp_num_threads(const std::map<std::string, std::string>& base,
                          const config::LaunchConfig& config);

}  // namespace ddprun::launcher
