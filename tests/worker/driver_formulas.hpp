// What the C++ drivers compared with PyTorch (rank_driver's hooks, join_driver, powersgd_driver,
// syncbn_driver) share with their Python references: the weights, the batches and the training
// step, each written once here; tests/worker/reference_formulas.py writes the same in Python.
#pragma once

#include <torch/torch.h>

#include <utility>

#include "ddprun/ddp.hpp"

namespace driver_formulas {

// Parameter k of `m`, element i: sin(0.7 i + k) / 2, computed in `dtype`.
inline void init_weights(torch::nn::Module& m, torch::Dtype dtype = torch::kFloat) {
  torch::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : m.parameters()) {
    p.copy_((torch::sin(torch::arange(p.numel(), dtype) * 0.7 + k) * 0.5).reshape(p.sizes()));
    ++k;
  }
}

// Rank r's batch at step s: 4 samples of `inputs` features, with targets of `outputs`.
inline std::pair<torch::Tensor, torch::Tensor> batch(int r, int s, int64_t inputs, int64_t outputs) {
  return {torch::cos(torch::arange(4 * inputs, torch::kFloat) * 0.37 + (r * 1.3 + s * 0.11)).reshape({4, inputs}),
          torch::sin(torch::arange(4 * outputs, torch::kFloat) * 0.21 + (r * 0.9 + s * 0.05)).reshape({4, outputs})};
}

// One step of `opt` on rank r's batch s: the mean squared error's gradient through `ddp`, which
// wraps `net`.
template <typename Net>
void step(ddprun::DistributedDataParallel& ddp, Net& net, torch::optim::Optimizer& opt, int r, int s,
          int64_t inputs, int64_t outputs) {
  const std::pair<torch::Tensor, torch::Tensor> xy = batch(r, s, inputs, outputs);
  opt.zero_grad();
  torch::mse_loss(ddp.forward([&] { return net->forward(xy.first); }), xy.second).backward();
  opt.step();
}

}  // namespace driver_formulas
