// PyTorch's powerSGD_hook (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py, the
// same algorithm in 1.13 and 2.11), operation for operation: the same kernels on the same
// tensors in the same order give bit-identical results against the libtorch we are built with.
#include "ddprun/powersgd_hook.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/version.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ddprun {

namespace {

// numpy.random.RandomState(seed).randint(1_000_000_000): RandomState is MT19937 seeded by
// init_genrand (std::mt19937's seeding), and randint draws 32-bit words masked to the smallest
// 2^k - 1 covering the range, rejecting those above it (numpy's legacy masked rejection).
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : engine_(seed) {}
  uint32_t randint_1e9() {
    constexpr uint32_t kMax = 999'999'999;
    constexpr uint32_t kMask = (1u << 30) - 1;
    for (;;) {
      const uint32_t v = static_cast<uint32_t>(engine_()) & kMask;
      if (v <= kMax) return v;
    }
  }

 private:
  std::mt19937 engine_;
};

// torch.norm(col, dim=1, keepdim=True): 1.13's Python torch.norm calls frobenius_norm for "fro"
// with a dim, 2.x's calls linalg.vector_norm.
constexpr int64_t kRows = 1;  // the dimension down each column of a batch × rows × cols tensor

at::Tensor column_norm(const at::Tensor& col) {
#if TORCH_VERSION_MAJOR >= 2
  return at::linalg_vector_norm(col, 2, at::IntArrayRef(kRows), /*keepdim=*/true);
#else
  return at::frobenius_norm(col, at::IntArrayRef(kRows), /*keepdim=*/true);
#endif
}

// _orthogonalize_gram_schmidt.
void orthogonalize_gram_schmidt(const at::Tensor& matrices, double epsilon) {
  const int64_t num_cols = matrices.size(2);
  for (int64_t i = 0; i < num_cols; ++i) {
    at::Tensor col = matrices.slice(2, i, i + 1);
    if (epsilon == 0) {
      col.div_(column_norm(col));
    } else {
      col.div_(column_norm(col) + epsilon);
    }
    if (i + 1 < num_cols) {
      at::Tensor rest = matrices.slice(2, i + 1);
      rest.sub_(at::sum(col * rest, at::IntArrayRef(kRows), /*keepdim=*/true) * col);
    }
  }
}

// _orthogonalize: Gram–Schmidt for rank <= 2 and half types, QR (in place) otherwise; the same
// rule in 1.13 and 2.11.
void orthogonalize(const at::Tensor& matrices, double epsilon) {
  const int64_t rank = matrices.size(2);
  const auto dtype = matrices.scalar_type();
  if (rank <= 2 || dtype == at::kHalf || dtype == at::kBFloat16) {
    orthogonalize_gram_schmidt(matrices, epsilon);
  } else {
    at::Tensor r = at::empty({matrices.size(0), rank, rank}, matrices.options());
    at::Tensor q = matrices;
    at::linalg_qr_out(q, r, matrices, "reduced");
  }
}

// The rate as Python's "%s" prints it in PyTorch's log line: a float's repr ("3.0", "2.5"), or
// the int 0 before anything was compressed.
std::string python_rate(int64_t numel_after, double rate) {
  if (numel_after == 0) return "0";
  std::string text = fmt::format("{}", rate);
  if (text.find_first_not_of("0123456789") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

struct PowerSGDState::Impl {
  explicit Impl(PowerSGDOptions o) : options(std::move(o)), rng(options.random_seed) {}

  // maybe_increase_iter.
  void maybe_increase_iter(const GradBucket& bucket) {
    if (bucket.is_last) ++iter;
  }

  PowerSGDOptions options;
  NumpyRandomState rng;
  std::map<std::size_t, at::Tensor> error;
  std::map<std::size_t, at::Tensor> p_memory;
  std::map<std::size_t, at::Tensor> q_memory;
  int64_t iter = 0;
  int64_t numel_before = 0;
  int64_t numel_after = 0;
  int64_t next_stats_report = 0;
};

PowerSGDState::PowerSGDState(PowerSGDOptions options) {
  if (options.matrix_approximation_rank < 1) {
    throw std::invalid_argument(fmt::format(
        "PowerSGDState: matrix_approximation_rank must be at least 1, not {}", options.matrix_approximation_rank));
  }
  if ((options.use_error_feedback || options.warm_start) && options.start_powerSGD_iter <= 1) {
    throw std::invalid_argument(fmt::format(
        "PowerSGDState: start_powerSGD_iter must be > 1 with use_error_feedback or warm_start (it is {}), "
        "as in PyTorch, whose DDP rebuilds its buckets after the first iteration",
        options.start_powerSGD_iter));
  }
  options.compression_stats_logging_frequency = std::max<int64_t>(1, options.compression_stats_logging_frequency);
  impl_ = std::make_unique<Impl>(std::move(options));
}

PowerSGDState::~PowerSGDState() = default;

const PowerSGDOptions& PowerSGDState::options() const { return impl_->options; }

int64_t PowerSGDState::iter() const { return impl_->iter; }

PowerSGDState::CompressionStats PowerSGDState::compression_stats() const {
  CompressionStats s;
  s.numel_before = impl_->numel_before;
  s.numel_after = impl_->numel_after;
  s.rate = s.numel_after > 0 ? static_cast<double>(s.numel_before) / static_cast<double>(s.numel_after) : 0;
  return s;
}

// One bucket's PowerSGD step, from the hook call to the reduced buffer.
struct PowerSGDHook {
  static GradFuture run(const std::shared_ptr<PowerSGDState>& owner, Comm& comm, GradBucket& bucket);
};

namespace {

// What the second half of the step (GradFuture::wait) needs of the first.
struct Step {
  std::shared_ptr<PowerSGDState> owner;
  Comm* comm = nullptr;
  GradBucket bucket;
  at::Tensor input_copy;                       // with error feedback
  std::vector<at::Tensor> uncompressed;        // views into the buffer
  at::Tensor uncompressed_memory;
  std::unique_ptr<PendingOp> uncompressed_op;  // none when there is nothing uncompressed
  std::unique_ptr<PendingOp> p_op;             // none when there is nothing compressed
  std::vector<at::Tensor> to_compress;         // batch × n × m, views into the buffer or stacked copies
  // This bucket's P and Q memory (the state's may be replaced meanwhile without warm_start),
  // and each compressed tensor's batch × n × r and batch × m × r views of it.
  at::Tensor p_memory, q_memory;
  std::vector<at::Tensor> ps, qs;
  // Batched mode: for each entry of to_compress that is a stacked copy, the views it came from.
  std::vector<std::vector<at::Tensor>> stacked_from;
};

}  // namespace

GradFuture PowerSGDHook::run(const std::shared_ptr<PowerSGDState>& owner, Comm& comm, GradBucket& bucket) {
  PowerSGDState::Impl& state = *owner->impl_;
  const PowerSGDOptions& o = state.options;
  if (state.iter < o.start_powerSGD_iter) {
    state.maybe_increase_iter(bucket);
    return allreduce_hook()(comm, bucket);
  }

  at::NoGradGuard no_grad;
  at::Tensor input = bucket.buffer;
  const std::size_t index = bucket.index;
  const int world = comm.size();
  auto step = std::make_shared<Step>();
  step->owner = owner;
  step->comm = &comm;
  step->bucket = bucket;

  // bucket.gradients(): the buffer viewed as each parameter's gradient, in layout order (checked
  // before the state changes).
  std::vector<at::Tensor> tensors;
  int64_t offset = 0;
  for (const auto& p : bucket.parameters) {
    tensors.push_back(input.slice(0, offset, offset + p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  if (offset != input.numel()) {
    throw std::logic_error(fmt::format(
        "powerSGD_hook: bucket {} has {} elements but its parameters have {}; the hook needs "
        "GradBucket::parameters, in the buffer's layout order",
        index, input.numel(), offset));
  }

  if (o.use_error_feedback) {
    auto found = state.error.find(index);
    if (found != state.error.end()) {
      input.add_(found->second);
    } else {
      state.error[index] = at::zeros({input.size(0)}, input.options());
    }
    step->input_copy = input.detach().clone();
  }

  // Step I: which tensors to compress.
  std::vector<at::Tensor> matrices;
  int64_t total_ps = 0, total_qs = 0;
  for (const auto& t : tensors) {
    if (t.dim() == 0) {  // PyTorch's hook cannot take a 0-d parameter; send it as it is
      step->uncompressed.push_back(t);
      state.numel_before += 1;
      state.numel_after += 1;
      continue;
    }
    at::Tensor matrix = t.view({t.size(0), -1});
    const int64_t n = matrix.size(0), m = matrix.size(1);
    const int64_t r = std::min({n, m, static_cast<int64_t>(o.matrix_approximation_rank)});
    const int64_t uncompressed_size = n * m, compressed_size = (n + m) * r;
    state.numel_before += uncompressed_size;
    // Python compares int * float < int: the same in doubles.
    if (static_cast<double>(compressed_size) * o.min_compression_rate < static_cast<double>(uncompressed_size)) {
      matrices.push_back(matrix);
      total_ps += n * r;
      total_qs += m * r;
      state.numel_after += compressed_size;
    } else {
      step->uncompressed.push_back(t);
      state.numel_after += uncompressed_size;
    }
  }

  // _report_compression_stats.
  if (bucket.is_last && state.iter >= state.next_stats_report) {
    const auto stats = owner->compression_stats();
    if (o.log) {
      o.log(fmt::format("Compression stats: iter {}, total before compression {}, total after compression {}, rate {}",
                        state.iter, stats.numel_before, stats.numel_after,
                        python_rate(stats.numel_after, stats.rate)));
    }
    state.next_stats_report = state.iter + o.compression_stats_logging_frequency;
  }

  // Step II: the uncompressed tensors, in one contiguous tensor.
  if (!step->uncompressed.empty()) {
    std::vector<at::Tensor> flat;
    for (const auto& t : step->uncompressed) flat.push_back(t.view({-1}));
    step->uncompressed_memory = at::cat(flat);
  }

  // Step III: P and Q memory, new unless warm_start finds last iteration's.
  bool randomize_qs = false;
  if (!o.warm_start || state.p_memory.count(index) == 0) {
    randomize_qs = true;
    state.p_memory[index] = at::empty({total_ps}, input.options());
    state.q_memory[index] = at::empty({total_qs}, input.options());
  }

  // Grouped by matrix shape, in the order each shape first appears (Python's defaultdict).
  std::vector<std::pair<std::vector<int64_t>, std::vector<at::Tensor>>> by_shape;
  for (const auto& matrix : matrices) {
    const std::vector<int64_t> shape = matrix.sizes().vec();
    auto it = std::find_if(by_shape.begin(), by_shape.end(), [&](const auto& g) { return g.first == shape; });
    if (it == by_shape.end()) {
      by_shape.push_back({shape, {matrix}});
    } else {
      it->second.push_back(matrix);
    }
  }
  for (const auto& group : by_shape) {
    const auto& same = group.second;
    if (o.batch_tensors_with_same_shape) {
      if (same.size() == 1) {
        step->to_compress.push_back(same[0].unsqueeze(0));
        step->stacked_from.emplace_back();
      } else {
        step->to_compress.push_back(at::stack(same));
        step->stacked_from.push_back(same);
      }
    } else {
      for (const auto& t : same) {
        step->to_compress.push_back(t.unsqueeze(0));
        step->stacked_from.emplace_back();
      }
    }
  }
  step->p_memory = state.p_memory.at(index);
  step->q_memory = state.q_memory.at(index);
  const at::Tensor& p_memory = step->p_memory;
  const at::Tensor& q_memory = step->q_memory;
  int64_t p_at = 0, q_at = 0;
  for (const auto& t : step->to_compress) {
    const int64_t batch = t.size(0), n = t.size(1), m = t.size(2);
    const int64_t r = std::min({n, m, static_cast<int64_t>(o.matrix_approximation_rank)});
    step->ps.push_back(p_memory.slice(0, p_at, p_at + batch * n * r).view({batch, n, r}));
    step->qs.push_back(q_memory.slice(0, q_at, q_at + batch * m * r).view({batch, m, r}));
    p_at += batch * n * r;
    q_at += batch * m * r;
  }

  if (!randomize_qs) {
    for (const auto& q : step->qs) orthogonalize(q, o.orthogonalization_epsilon);
  } else {
    // torch.manual_seed(state.rng.randint(1_000_000_000)) inside fork_rng, then torch.randn on
    // the CPU: a CPU generator of its own, seeded the same way, draws the same numbers and
    // leaves the global one alone. The draw happens even when nothing is compressed.
    at::Generator gen = at::detail::createCPUGenerator(state.rng.randint_1e9());
    for (const auto& q : step->qs) {
      q.copy_(at::randn(q.sizes(), gen, at::TensorOptions().dtype(q.scalar_type())));
      orthogonalize(q, o.orthogonalization_epsilon);
    }
  }

  // Ps = M Q.
  for (std::size_t k = 0; k < step->to_compress.size(); ++k) {
    at::Tensor p = step->ps[k];
    at::bmm_out(p, step->to_compress[k], step->qs[k]);
  }

  // PyTorch all-reduces the uncompressed tensors now and the Ps once that is done; the Ps do not
  // depend on it, so both go now (every rank starts the same sequence; empty ones are skipped
  // on every rank alike, their shapes being the same everywhere).
  if (step->uncompressed_memory.defined()) {
    step->uncompressed_op = comm.start_all_reduce(step->uncompressed_memory, ReduceOp::kSum);
  }
  if (p_memory.numel() > 0) step->p_op = comm.start_all_reduce(p_memory, ReduceOp::kSum);

  return GradFuture([step, world]() -> at::Tensor {
    PowerSGDState::Impl& state = *step->owner->impl_;
    const PowerSGDOptions& o = state.options;
    const std::size_t index = step->bucket.index;
    at::Tensor input = step->bucket.buffer;
    at::NoGradGuard no_grad;

    // unpack_uncompressed_tensors_and_allreduce_ps.
    if (step->uncompressed_op) {
      step->uncompressed_op->wait();
      at::Tensor memory = step->uncompressed_memory.div_(world);
      int64_t at_ = 0;
      for (auto& t : step->uncompressed) {
        t.copy_(memory.slice(0, at_, at_ + t.numel()).view_as(t));
        at_ += t.numel();
      }
    }

    // compute_qs: the Ps summed (not divided: orthogonalised next), Qs = Mᵀ P, summed.
    std::unique_ptr<PendingOp> q_op;
    if (step->p_op) {
      step->p_op->wait();
      for (const auto& p : step->ps) orthogonalize(p, o.orthogonalization_epsilon);
      for (std::size_t k = 0; k < step->to_compress.size(); ++k) {
        at::Tensor q = step->qs[k];
        at::bmm_out(q, step->to_compress[k].transpose(1, 2), step->ps[k]);
      }
      q_op = step->comm->start_all_reduce(step->q_memory, ReduceOp::kSum);
    }

    // decompress: M = P Qᵀ with the averaged Qs, into the buffer.
    if (q_op) {
      q_op->wait();
      step->q_memory.div_(world);
      for (std::size_t k = 0; k < step->to_compress.size(); ++k) {
        at::Tensor m = step->to_compress[k];
        at::bmm_out(m, step->ps[k], step->qs[k].transpose(1, 2));
      }
      for (std::size_t k = 0; k < step->to_compress.size(); ++k) {
        const auto& originals = step->stacked_from[k];
        for (std::size_t i = 0; i < originals.size(); ++i) {
          at::Tensor original = originals[i];
          original.copy_(step->to_compress[k][static_cast<int64_t>(i)]);
        }
      }
    }

    if (o.use_error_feedback) state.error[index] = step->input_copy - input;
    if (!o.warm_start) {
      state.p_memory.clear();
      state.q_memory.clear();
    }
    state.maybe_increase_iter(step->bucket);
    return input;
  });
}

CommHook powerSGD_hook(std::shared_ptr<PowerSGDState> state) {
  if (!state) throw std::invalid_argument("powerSGD_hook: the state is null");
  return [state = std::move(state)](Comm& comm, GradBucket& bucket) {
    return PowerSGDHook::run(state, comm, bucket);
  };
}

}  // namespace ddprun
