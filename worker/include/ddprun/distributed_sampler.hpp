// Which dataset indices each rank visits in an epoch: PyTorch's DistributedSampler, index for
// index, usable with libtorch's data loader.
#pragma once

#include <torch/data/samplers/base.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "ddprun/export.hpp"

namespace ddprun {

struct SamplerSpec {
  int64_t dataset_size = 0;
  int num_replicas = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  // Drop the tail so every rank gets the same number of distinct indices, rather than
  // padding with repeats from the start.
  bool drop_last = false;
};

// Indices per rank per epoch: floor(N / W) with drop_last, ceil(N / W) without.
DDPRUN_API int64_t samples_per_rank(const SamplerSpec& spec);

// The indices `spec.rank` visits in `epoch`, exactly as torch.utils.data.DistributedSampler
// gives them: randperm(N) with a CPU generator seeded seed + epoch (or 0..N-1 without
// shuffle); padded cyclically from the start, or truncated with drop_last, to
// samples_per_rank * W; then every W-th index starting at the rank.
DDPRUN_API std::vector<int64_t> distributed_indices(const SamplerSpec& spec, int64_t epoch);

// A sampler for torch::data::make_data_loader. libtorch's loader takes its sampler by value
// and resets it at the start of every pass; copies of a DistributedSampler share their epoch,
// so set_epoch() on the copy you kept takes effect at the loader's next pass:
//
//   DistributedSampler sampler(spec);
//   auto loader = torch::data::make_data_loader(dataset, sampler, options);
//   for (int64_t epoch = 0; ...) { sampler.set_epoch(epoch); for (auto& batch : *loader) ... }
class DDPRUN_API DistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  explicit DistributedSampler(SamplerSpec spec);

  // Selects the shuffle of the next pass, for this sampler and every copy of it.
  void set_epoch(int64_t epoch);
  int64_t epoch() const;
  // Indices this rank visits per epoch.
  std::size_t size() const;
  const SamplerSpec& spec() const { return spec_; }

  // Recomputes the indices for the current epoch and rewinds; `new_size` replaces the
  // dataset size.
  void reset(torch::optional<std::size_t> new_size = torch::nullopt) override;
  // The next up to `batch_size` indices of this epoch, or nothing at its end.
  torch::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;
  // Store and restore the epoch and the position within it.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  SamplerSpec spec_;
  std::shared_ptr<std::atomic<int64_t>> epoch_;
  std::vector<int64_t> indices_;
  std::size_t position_ = 0;
};

}  // namespace ddprun
