// Checkpoints that hold a whole run and survive a crash: rank 0 writes them atomically, and after
// a restart every rank resumes from the newest complete one, in place.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/comm.hpp"
#include "ddprun/distributed_sampler.hpp"
#include "ddprun/export.hpp"
#include "ddprun/launch_env.hpp"

namespace ddprun {

// The folder a Checkpointer given none uses: DDPRUN_SNAPSHOT_DIR, the folder in memory that
// ddprun keeps for the job on this node across worker deaths, restarts and rounds
// (docs/guides/snapshots.md), when it is set and not empty; else `fallback` (a program started
// alone or by torchrun). A folder the program names is never replaced by it.
DDPRUN_API std::filesystem::path default_checkpoint_dir(const std::filesystem::path& fallback = "checkpoints",
                                                        const EnvLookup& env = process_env());

// "checkpoint-<step, 9 digits>.pt"
DDPRUN_API std::string checkpoint_file_name(int64_t step);

// The newest step among `file_names` of complete checkpoints; temporaries and unrelated files
// are ignored.
DDPRUN_API std::optional<int64_t> newest_checkpoint(const std::vector<std::string>& file_names);

// What a checkpoint holds besides its step. `model` is required; every other item is saved
// and restored only when given. Pointers, not copies: load_latest() restores into them.
struct CheckpointItems {
  torch::nn::Module* model = nullptr;
  // Its state (momentum buffers, ...) and its parameter groups' options (learning rates).
  torch::optim::Optimizer* optimizer = nullptr;
  // Its step count; the learning rates it set live in the optimizer's options.
  torch::optim::LRScheduler* scheduler = nullptr;
  // Its epoch and position within the epoch (rank 0's: every rank is at the same place).
  DistributedSampler* sampler = nullptr;
  // Every rank's random number generators: the default CPU generator and, where a GPU is
  // visible, the current GPU's. Restored only when the world size is the same as at the save.
  bool rng_states = true;
  // Your own entries: numbers, strings, booleans, tensors (a best metric, the configuration).
  // load_latest() replaces the map's contents with the saved entries.
  std::map<std::string, c10::IValue>* extra = nullptr;
};

class DDPRUN_API Checkpointer {
 public:
  // Only rank 0 touches `dir` (creating it if needed); the other ranks receive what it reads
  // over `comm`, so the directory need not be visible from every node.
  Checkpointer(std::filesystem::path dir, std::shared_ptr<Comm> comm, int keep_last = 2);
  // In default_checkpoint_dir(): DDPRUN_SNAPSHOT_DIR under ddprun, else "checkpoints" in the
  // working directory.
  explicit Checkpointer(std::shared_ptr<Comm> comm, int keep_last = 2);

  // Collective (every rank calls it; it gathers the RNG states); only rank 0 writes. `step`
  // is the number of steps (or epochs) completed, so resuming starts at step `step`. Writes
  // a temporary file, fsyncs it and renames it into place, so a crash at any moment leaves
  // either the old or the new checkpoint complete; then removes all but the newest
  // `keep_last` checkpoints. Throws std::runtime_error on I/O failure.
  void save(int64_t step, const CheckpointItems& items);

  // Collective. Rank 0 reads the newest complete checkpoint and sends it to every rank; each
  // copies it into `items` in place: the model's parameters and buffers keep their tensors
  // (so DistributedDataParallel and the optimizer, which hold them, go on working). Returns
  // the saved step, or nothing (and changes nothing) when there is no checkpoint yet. Throws
  // std::runtime_error when the checkpoint lacks an item that `items` asks for or does not
  // fit the model.
  std::optional<int64_t> load_latest(const CheckpointItems& items);

  // The model and the optimizer only.
  void save(int64_t step, const torch::nn::Module& model, const torch::optim::Optimizer& optimizer);
  std::optional<int64_t> load_latest(torch::nn::Module& model, torch::optim::Optimizer& optimizer);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::shared_ptr<Comm> comm_;
  int keep_last_;
};

}  // namespace ddprun
