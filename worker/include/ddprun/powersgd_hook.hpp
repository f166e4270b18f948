// PowerSGD gradient compression (Vogels et al., https://arxiv.org/abs/1905.13727) as a DDP
// communication hook: PyTorch's torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook, with
// the same state, options, random projections and arithmetic, so a recipe moved from Python
// trains to the same numbers.
//
//   ddprun::PowerSGDOptions o;
//   o.matrix_approximation_rank = 1;
//   o.start_powerSGD_iter = 10;
//   auto state = std::make_shared<ddprun::PowerSGDState>(o);   // keep it: it is the hook's memory
//   ddp.register_comm_hook(ddprun::powerSGD_hook(state));
//
// Python: state = PowerSGDState(process_group=None, matrix_approximation_rank=1,
//                               start_powerSGD_iter=10)
//         ddp.register_comm_hook(state, powerSGD_hook)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ddprun/comm_hook.hpp"
#include "ddprun/export.hpp"

namespace ddprun {

// PowerSGDState's constructor arguments, with PyTorch's names and defaults.
struct PowerSGDOptions {
  // The rank r of the approximation M ≈ P Qᵀ of each compressed gradient matrix (at most the
  // matrix's smaller side). Lower: stronger compression. PyTorch suggests 1, 2, 4, ...
  int matrix_approximation_rank = 1;
  // Iterations (synchronised backward passes) of plain averaging (allreduce_hook) before
  // compression starts. Must be > 1 when use_error_feedback or warm_start is on, as in PyTorch
  // (whose DDP rebuilds its buckets after the first iteration).
  int64_t start_powerSGD_iter = 1000;
  // A gradient of n×m elements (m: everything after the first dimension; a bias is n×1) is
  // compressed only if (n + m) · r · min_compression_rate < n · m; the others, biases included
  // unless this is below 1, are averaged uncompressed in one all-reduce per bucket.
  double min_compression_rate = 2;
  // Add last iteration's local compression error (the gradient before minus the bucket after
  // the reduction) to this iteration's gradient.
  bool use_error_feedback = true;
  // Start each iteration's power step from the last iteration's Q instead of a new random one.
  bool warm_start = true;
  // Added to each column's norm in the orthogonalisation (Gram–Schmidt, for r ≤ 2) to avoid a
  // division by zero; 0 gives NaN for an all-zero column, as in PyTorch.
  double orthogonalization_epsilon = 0;
  // Seeds numpy.random.RandomState(random_seed) as PyTorch does, whose draws seed the random Qs.
  uint32_t random_seed = 0;
  // Compression statistics go to `log` at most every this many iterations once compression has
  // started (PyTorch's logger.info; values below 1 mean 1).
  int64_t compression_stats_logging_frequency = 10000;
  // Compress the gradients of one bucket that have the same matrix shape together (one batched
  // product instead of one per gradient; costs a stacked copy). Changes the random Qs, as in
  // PyTorch.
  bool batch_tensors_with_same_shape = false;
  // Receives the compression statistics lines; none by default (PyTorch logs them at info level,
  // which Python does not show by default).
  std::function<void(const std::string&)> log;
};

// The hook's memory across iterations, held by the caller: the iteration count, each bucket's
// local error and P/Q memory (keyed by bucket index), the random state and the statistics.
// One state serves one DDP wrapper; it is not thread-safe (DDP calls its hook from one thread
// at a time).
class DDPRUN_API PowerSGDState {
 public:
  // Throws std::invalid_argument for matrix_approximation_rank < 1, and for
  // start_powerSGD_iter <= 1 with use_error_feedback or warm_start (as PyTorch).
  explicit PowerSGDState(PowerSGDOptions options = {});
  ~PowerSGDState();
  PowerSGDState(const PowerSGDState&) = delete;
  PowerSGDState& operator=(const PowerSGDState&) = delete;

  const PowerSGDOptions& options() const;
  // Iterations completed (PyTorch's state.iter): counted when the last bucket of a backward
  // pass is reduced.
  int64_t iter() const;

  struct CompressionStats {
    double rate = 0;               // numel_before / numel_after; 0 before any compression
    int64_t numel_before = 0;      // elements of all gradients seen while compressing
    int64_t numel_after = 0;       // elements sent for them (P and Q, or the uncompressed tensor)
  };
  // PyTorch's state.compression_stats().
  CompressionStats compression_stats() const;

 private:
  friend struct PowerSGDHook;  // powerSGD_hook's implementation
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// PyTorch's powerSGD_hook bound to `state`. Needs the bucket's parameters (DDP gives them).
// Before state.start_powerSGD_iter iterations it is allreduce_hook. Then, per bucket: adds the
// error (use_error_feedback); all-reduces the gradients not worth compressing (sum, then divided
// by the world size); for the others computes P = M Q with an orthonormal Q (random, or last
// iteration's with warm_start), all-reduces the Ps, orthonormalises them, computes Q = Mᵀ P,
// all-reduces the Qs and divides them by the world size, and writes M = P Qᵀ back into the
// bucket. Costs two all-reduces more per bucket than plain averaging, with far fewer elements.
DDPRUN_API CommHook powerSGD_hook(std::shared_ptr<PowerSGDState> state);

}  // namespace ddprun
