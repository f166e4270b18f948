// How DistributedDataParallel groups gradients into buckets, each reduced by one all-reduce.
// A pure function of the parameters' sizes, so every rank computes the same plan.
#pragma once

#include <cstddef>
#include <vector>

#include "ddprun/export.hpp"

namespace ddprun {

// PyTorch's defaults (kDefaultFirstBucketBytes, kDefaultBucketBytesCap in reducer.hpp).
inline constexpr double kDefaultBucketCapMb = 25.0;
inline constexpr double kDefaultFirstBucketCapMb = 1.0;

struct ParamSlot {
  std::size_t bytes = 0;
  // Parameters of different groups (dtype and device) never share a bucket.
  int group = 0;
};

struct Bucket {
  // Indices into the parameter list, in the order their gradients are laid out in the bucket.
  std::vector<std::size_t> params;
  std::size_t bytes = 0;
};

// Buckets in the order they are reduced, which is the same on every rank.
// Parameters are taken last to first: gradients of a model whose parameters are registered in
// forward order become ready roughly in that order. Each group fills one bucket at a time, and
// a bucket closes as soon as it holds at least its cap: `first_cap_bytes` for a group's first
// bucket (small, so that the first all-reduce starts early in backward), `cap_bytes` after
// that. Buckets are ordered by their first parameter. This is the assignment PyTorch's DDP
// settles on after its first iteration for such a model.
DDPRUN_API std::vector<Bucket> plan_buckets(const std::vector<ParamSlot>& params, std::size_t first_cap_bytes,
                                 std::size_t cap_bytes);

// Megabytes (2^20 bytes, as PyTorch's bucket_cap_mb) to bytes.
DDPRUN_API std::size_t megabytes_to_bytes(double mb);

}  // namespace ddprun
