// Checkpoints that survive a crash: rank 0 writes the model and optimizer state atomically,
// and after a restart every rank resumes from the newest complete one.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/comm.hpp"

namespace ddprun {

// "checkpoint-<step, 9 digits>.pt"
std::string checkpoint_file_name(int64_t step);

// The newest step among `file_names` of complete checkpoints; temporaries and unrelated files
// are ignored.
std::optional<int64_t> newest_checkpoint(const std::vector<std::string>& file_names);

class Checkpointer {
 public:
  // Only rank 0 touches `dir` (creating it if needed); the other ranks receive what it reads
  // over `comm`, so the directory need not be visible from every node.
  Checkpointer(std::filesystem::path dir, std::shared_ptr<Comm> comm, int keep_last = 2);

  // Called by every rank; only rank 0 writes. Stores `step`, the module's parameters and
  // buffers and the optimizer's state in a temporary file, fsyncs it and renames it into
  // place, so a crash at any moment leaves either the old or the new checkpoint complete.
  // Then removes all but the newest `keep_last` checkpoints. Throws std::runtime_error on
  // I/O failure.
  void save(int64_t step, const torch::nn::Module& module, const torch::optim::Optimizer& optimizer);

  // Collective. Rank 0 reads the newest complete checkpoint and sends it to every rank; each
  // loads it into `module` and `optimizer`. Returns its step, or nothing (and changes
  // nothing) when there is no checkpoint yet.
  std::optional<int64_t> load_latest(torch::nn::Module& module, torch::optim::Optimizer& optimizer);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::shared_ptr<Comm> comm_;
  int keep_last_;
};

}  // namespace ddprun
