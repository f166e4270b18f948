// Communication hooks for DistributedDataParallel (PyTorch's DDP communication hooks): a hook
// decides how each bucket of gradients is reduced across ranks, e.g. compressed to 16 bits.
//
//   ddprun::DistributedDataParallel ddp(net, comm);
//   ddp.register_comm_hook(ddprun::fp16_compress_hook());   // once, before the first backward
//
// The built-in hooks do what PyTorch's torch.distributed.algorithms.ddp_comm_hooks.default_hooks
// do, with the same arithmetic, so a model trains to the same numbers as in Python.
// PowerSGD (powerSGD_hook with its PowerSGDState) is in powersgd_hook.hpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "ddprun/comm.hpp"
#include "ddprun/export.hpp"

namespace ddprun {

// One bucket of gradients, handed to a hook when all of its gradients are ready.
struct GradBucket {
  std::size_t index = 0;   // its place in the reduction order; 0 is reduced first
  // The bucket's gradients, summed over this rank's backward pass(es), one flat tensor, NOT
  // divided by the world size: with a hook registered, averaging is the hook's job.
  at::Tensor buffer;
  std::vector<at::Tensor> parameters;  // whose gradients `buffer` holds, in its layout order
  bool is_last = false;                // the last bucket of this backward pass
};

// A reduction in flight. wait() blocks until it is done and returns the reduced gradients: a
// tensor with the buffer's number of elements (the buffer itself, or another tensor, which DDP
// copies into the bucket and converts to the bucket's dtype).
class DDPRUN_API GradFuture {
 public:
  explicit GradFuture(std::function<at::Tensor()> wait) : wait_(std::move(wait)) {}
  at::Tensor wait() { return wait_(); }

 private:
  std::function<at::Tensor()> wait_;
};

// Starts the reduction of `bucket` over `comm`'s ranks. DDP calls it on the backward thread for
// every bucket in the same order on every rank, and waits for each future at the end of the
// backward pass; a hook must start exactly the same collectives on every rank.
using CommHook = std::function<GradFuture(Comm& comm, GradBucket& bucket)>;

// Divides the buffer by the world size and all-reduces it (sum): what DDP does without a hook.
DDPRUN_API CommHook allreduce_hook();
// Casts the buffer to float16 (bfloat16), divides by the world size, all-reduces that, and
// casts the result back: half the bytes on the wire. bfloat16 needs a backend that reduces it
// (NCCL; gloo from PyTorch 2.1 on).
DDPRUN_API CommHook fp16_compress_hook();
DDPRUN_API CommHook bf16_compress_hook();
// Runs `hook` on a float16 (bfloat16) copy of the buffer and casts its result back.
DDPRUN_API CommHook fp16_compress_wrapper(CommHook hook);
DDPRUN_API CommHook bf16_compress_wrapper(CommHook hook);

}  // namespace ddprun
