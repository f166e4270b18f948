#include "ddprun/comm_hook.hpp"

#include <ATen/core/grad_mode.h>

#include <memory>
#include <utility>

namespace ddprun {

namespace {

// PyTorch's fp16_compress_wrapper / bf16_compress_wrapper.
CommHook compress_wrapper(c10::ScalarType dtype, CommHook hook) {
  return [dtype, hook = std::move(hook)](Comm& comm, GradBucket& bucket) {
    at::NoGradGuard no_grad;
    at::Tensor buffer = bucket.buffer;
    GradBucket compressed = bucket;
    compressed.buffer = buffer.to(dtype);
    auto inner = std::make_shared<GradFuture>(hook(comm, compressed));
    return GradFuture([inner, buffer]() mutable {
      at::Tensor result = inner->wait();
      at::NoGradGuard no_grad;
      return buffer.copy_(result);
    });
  };
}

}  // namespace

CommHook allreduce_hook() {
  return [](Comm& comm, GradBucket& bucket) {
    at::Tensor buffer = bucket.buffer;
    {
      at::NoGradGuard no_grad;
      buffer.div_(comm.size());
    }
    std::shared_ptr<PendingOp> op = comm.start_all_reduce(buffer, ReduceOp::kSum);
    return GradFuture([op, buffer] {
      op->wait();
      return buffer;
    });
  };
}

// PyTorch's _compress_hook casts, divides in the narrow type, all-reduces and casts back: the
// same operations, in the same order, as the wrapper around allreduce_hook.
CommHook fp16_compress_hook() { return fp16_compress_wrapper(allreduce_hook()); }
CommHook bf16_compress_hook() { return bf16_compress_wrapper(allreduce_hook()); }
CommHook fp16_compress_wrapper(CommHook hook) { return compress_wrapper(at::kHalf, std::move(hook)); }
CommHook bf16_compress_wrapper(CommHook hook) { return compress_wrapper(at::kBFloat16, std::move(hook)); }

}  // namespace ddprun
