#include "ddprun/distributed_sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/serialize/archive.h>

#include <numeric>
#include <stdexcept>
#include <string>

namespace ddprun {

namespace {

void check(const SamplerSpec& spec) {
  if (spec.dataset_size < 0) throw std::invalid_argument("DistributedSampler: dataset_size < 0");
  if (spec.num_replicas < 1) throw std::invalid_argument("DistributedSampler: num_replicas < 1");
  if (spec.rank < 0 || spec.rank >= spec.num_replicas) {
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(spec.rank) +
                                " is not in [0, " + std::to_string(spec.num_replicas) + ")");
  }
}

}  // namespace

int64_t samples_per_rank(const SamplerSpec& spec) {
  check(spec);
  const int64_t n = spec.dataset_size;
  const int64_t w = spec.num_replicas;
  // Python: ceil((N - W) / W) when drop_last and N % W != 0, which is floor(N / W).
  if (spec.drop_last) return n / w;
  return (n + w - 1) / w;
}

std::vector<int64_t> distributed_indices(const SamplerSpec& spec, int64_t epoch) {
  const int64_t per_rank = samples_per_rank(spec);
  const int64_t n = spec.dataset_size;
  if (per_rank == 0) return {};

  std::vector<int64_t> base(static_cast<std::size_t>(n));
  if (spec.shuffle) {
    // A CPU generator and the CPU randperm kernel, even on GPU machines: this is what makes the
    // sequence equal to Python's torch.randperm(n, generator=Generator().manual_seed(s)).
    auto generator = at::detail::createCPUGenerator(spec.seed + static_cast<uint64_t>(epoch));
    const at::Tensor perm = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
    const int64_t* p = perm.data_ptr<int64_t>();
    std::copy(p, p + n, base.begin());
  } else {
    std::iota(base.begin(), base.end(), int64_t{0});
  }

  // Position i of the padded (or truncated) list is base[i % n]; the rank takes every W-th.
  std::vector<int64_t> out;
  out.reserve(static_cast<std::size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) {
    const int64_t i = spec.rank + k * spec.num_replicas;
    out.push_back(base[static_cast<std::size_t>(i % n)]);
  }
  return out;
}

DistributedSampler::DistributedSampler(SamplerSpec spec)
    : spec_(spec), epoch_(std::make_shared<std::atomic<int64_t>>(0)) {
  check(spec_);
  reset();
}

void DistributedSampler::set_epoch(int64_t epoch) { epoch_->store(epoch); }

int64_t DistributedSampler::epoch() const { return epoch_->load(); }

std::size_t DistributedSampler::size() const {
  return static_cast<std::size_t>(samples_per_rank(spec_));
}

void DistributedSampler::reset(torch::optional<std::size_t> new_size) {
  if (new_size) spec_.dataset_size = static_cast<int64_t>(*new_size);
  indices_ = distributed_indices(spec_, epoch_->load());
  position_ = 0;
}

torch::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  if (position_ >= indices_.size()) return torch::nullopt;
  const std::size_t end = std::min(indices_.size(), position_ + batch_size);
  std::vector<std::size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                                 indices_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", at::scalar_tensor(epoch_->load(), at::kLong), /*is_buffer=*/true);
  archive.write("position", at::scalar_tensor(static_cast<int64_t>(position_), at::kLong),
                /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  at::Tensor epoch;
  at::Tensor position;
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  epoch_->store(epoch.item<int64_t>());
  reset();
  position_ = std::min(static_cast<std::size_t>(position.item<int64_t>()), indices_.size());
}

}  // namespace ddprun
