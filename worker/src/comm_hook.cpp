#include "ddprun/comm_hook.hpp"

#include <ATen/core/grad_mode.h>

#include <memory>
#include <utility>

namespace ddprun {

namespace {

// PyTorch's _compress_hook: the division happens in the narrow type, after the cast.
CommHook compress_hook(c10::ScalarType dtype) {
  return [dtype](Comm& comm, GradBucket& bucket) {
    at::NoGradGuard no_grad;
    at::Tensor compressed = bucket.buffer.to(dtype).div_(comm.size());
    std::shared_ptr<PendingOp> op = comm.start_all_reduce(compressed, ReduceOp::kSum);
    at::Tensor buffer = bucket.buffer;
    return GradFuture([op, compressed, buffer]() mutable {
      op->wait();
      at::NoGradGuard no_grad;
      return buffer.copy_(compressed);
    });
  };
}

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

CommHook fp16_compress_hook() { return compress_hook(at::kHalf); }
CommHook bf16_compress_hook() { return compress_hook(at::kBFloat16); }
CommHook fp16_compress_wrapper(CommHook hook) { return compress_wrapper(at::kHalf, std::move(hook)); }
CommHook bf16_compress_wrapper(CommHook hook) { return compress_wrapper(at::kBFloat16, std::move(hook)); }

}  // namespace ddprun
