// Blocking collectives for training code, on top of a Comm's primitives. Each is one call
// that every rank makes in the same order; each is bounded by the communicator's collective
// timeout and throws CommError naming the operation when a peer dies or hangs. Each first
// checks that every rank is making the same call (Comm::check_agreement) and throws CommError
// naming every rank's call when they are not.
//
// Tensors may be of any shape and layout: non-contiguous ones are reduced through a
// contiguous copy. They must live on comm.device().
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <string_view>
#include <vector>

#include "ddprun/comm.hpp"
#include "ddprun/export.hpp"

namespace ddprun {

// Reduces `tensor` in place: afterwards every rank holds the element-wise sum, min or max.
DDPRUN_API void all_reduce(Comm& comm, at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);

// Replaces the floating-point `tensor` in place with its mean over ranks: each rank divides
// by the world size, then the results are summed (gloo has no average). Every rank ends with
// the same bits.
DDPRUN_API void reduce_mean(Comm& comm, at::Tensor& tensor);

// Overwrites `tensor` on every rank with its value on `root`.
DDPRUN_API void broadcast(Comm& comm, at::Tensor& tensor, int root = 0);

// Broadcasts many tensors from `root` with few calls: they are grouped by dtype and packed
// into flat buffers of at most `chunk_bytes` (one tensor larger than that travels alone).
// Every rank must pass tensors of the same shapes and dtypes in the same order.
DDPRUN_API void broadcast_tensors(Comm& comm, const std::vector<at::Tensor>& tensors, int root = 0,
                       std::size_t chunk_bytes = 250u << 20);

// Returns every rank's `tensor`, indexed by rank. Shapes and dtypes must agree across ranks.
DDPRUN_API std::vector<at::Tensor> all_gather(Comm& comm, const at::Tensor& tensor);

// Returns every rank's `bytes`, indexed by rank; the lengths may differ. For small objects
// (names, shapes, paths), not bulk data.
DDPRUN_API std::vector<std::string> all_gather_bytes(Comm& comm, std::string_view bytes);

// Returns once every rank has reached it.
DDPRUN_API void barrier(Comm& comm);

}  // namespace ddprun
