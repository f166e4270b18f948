// Synchronised batch normalisation (PyTorch's torch.nn.SyncBatchNorm): in training, every rank
// normalises with the mean and variance of the global batch, all ranks' samples together, and
// the backward pass sums the gradient statistics across ranks to match. Ranks may have batches
// of different sizes (an empty one included). Evaluation uses the running statistics and does
// not communicate.
//
//   auto net = build_model();                                   // with torch::nn::BatchNorm2d
//   auto comm = ddprun::init_process_group();
//   ddprun::convert_sync_batchnorm(net, comm);                   // before the optimizer and DDP
//   ddprun::DistributedDataParallel ddp(net, comm);
//
// The arithmetic is that of PyTorch's SyncBatchNorm (torch/nn/modules/_functions.py and its CUDA
// kernels), written with ordinary tensor operations, so it runs on every device: the results
// agree with PyTorch's to rounding, not bit for bit.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <ostream>

#include "ddprun/comm.hpp"
#include "ddprun/export.hpp"

namespace ddprun {

// Batch normalisation over dimension 1 of an input of 2 or more dimensions (what BatchNorm1d,
// 2d and 3d do), with the global batch's statistics in training. The parameters and buffers
// have BatchNorm's names, so state dicts and checkpoints carry over.
class DDPRUN_API SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  // Collective in training: every rank's forward and backward passes of the module must be
  // matched by the other ranks' (one all-gather forward, one all-reduce backward, each checked
  // like the library's collectives, collectives.hpp). `comm` is the communicator of the ranks
  // whose batches are pooled.
  SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, std::shared_ptr<Comm> comm);

  // Training: normalises with the global batch's statistics and updates the running mean
  // and the running variance (unbiased over the global count) with `momentum`, or with the
  // cumulative average when momentum is unset. Evaluation, or world size 1: BatchNorm's own
  // forward, no communication.
  at::Tensor forward(const at::Tensor& input);

  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  torch::nn::BatchNormOptions options;
  at::Tensor weight;               // undefined unless options.affine()
  at::Tensor bias;                 // undefined unless options.affine()
  at::Tensor running_mean;         // these three undefined unless options.track_running_stats()
  at::Tensor running_var;
  at::Tensor num_batches_tracked;

 private:
  friend struct SyncBatchNormAccess;
  // make_tensors false: the caller registers the tensors (convert_sync_batchnorm).
  SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, std::shared_ptr<Comm> comm, bool make_tensors);
  std::shared_ptr<Comm> comm_;
};
TORCH_MODULE(SyncBatchNorm);

// Replaces every BatchNorm1d, 2d and 3d in `module`'s tree with a SyncBatchNorm over `comm`
// that takes over its tensors (the same weight, bias and buffer objects, so an optimizer made
// earlier still holds the right parameters), its options and its training mode. Returns the
// converted tree: `module` itself, changed in place, or the new SyncBatchNorm when `module` is
// a BatchNorm.
//
// A module calls the new layer when it reaches its children through the registry or a
// Sequential / ModuleList, which are updated in place. A module that calls a BatchNorm through
// a member of its own (`torch::nn::BatchNorm2d bn`) still calls the old one, unsynchronised:
// hold a SyncBatchNorm there instead, or put the layer in a Sequential.
DDPRUN_API std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(
    std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Comm> comm);

}  // namespace ddprun
