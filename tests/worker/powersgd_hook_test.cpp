// ddp/powersgd_hook.cpp: PowerSGD's options and arithmetic, on a communicator that sums
// nothing (one rank).
#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddprun/comm.hpp"
#include "ddprun/comm_hook.hpp"
#include "ddprun/powersgd_hook.hpp"

// libtorch defines a glog-style CHECK that aborts and is not counted: doctest's must win.
#undef CHECK
#include <doctest/doctest.h>

using namespace ddprun;

TEST_CASE("powerSGD state: PyTorch's checks on the options") {
  PowerSGDOptions o;
  o.start_powerSGD_iter = 1;
  CHECK_THROWS_AS(PowerSGDState{o}, std::invalid_argument);  // error feedback and warm start need > 1
  o.use_error_feedback = false;
  CHECK_THROWS_AS(PowerSGDState{o}, std::invalid_argument);  // warm start alone too
  o.warm_start = false;
  CHECK_NOTHROW(PowerSGDState{o});
  o.matrix_approximation_rank = 0;
  CHECK_THROWS_AS(PowerSGDState{o}, std::invalid_argument);
  CHECK_THROWS_AS(powerSGD_hook(nullptr), std::invalid_argument);
}

namespace {

// One rank: every all-reduce leaves its tensor as it is.
class OneRank : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "test"; }
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
  std::unique_ptr<PendingOp> start_all_reduce(at::Tensor, ReduceOp) override {
    ++all_reduces;
    struct Done : PendingOp {
      void wait() override {}
    };
    return std::make_unique<Done>();
  }
  void broadcast(at::Tensor, int) override {}
  std::vector<at::Tensor> all_gather(const at::Tensor& flat) override { return {flat}; }
  void barrier() override {}
  void check_agreement(const CollectiveCall&) override {}
  bool healthy() const override { return true; }
  int all_reduces = 0;
};

}  // namespace

TEST_CASE("powerSGD hook: plain averaging first, then a rank-1 gradient comes back whole") {
  PowerSGDOptions o;
  o.start_powerSGD_iter = 2;
  auto state = std::make_shared<PowerSGDState>(o);
  CommHook hook = powerSGD_hook(state);
  OneRank comm;
  // Layout: a bias of 8 (1-D: sent uncompressed), then an 8×6 weight whose gradient u vᵀ has rank 1.
  const std::vector<at::Tensor> params = {at::zeros({8}), at::zeros({8, 6})};
  const at::Tensor bias = at::linspace(-1, 1, 8);
  const at::Tensor weight = at::outer(at::linspace(0.5, 2, 8), at::linspace(-3, 1, 6));
  auto step = [&] {
    GradBucket bucket{0, at::cat({bias, weight.flatten()}), params, /*is_last=*/true};
    return hook(comm, bucket).wait();
  };
  for (int i = 0; i < 2; ++i) {
    CHECK(at::equal(step(), at::cat({bias, weight.flatten()})));
    CHECK(state->iter() == i + 1);
  }
  CHECK(comm.all_reduces == 2);
  CHECK(state->compression_stats().numel_before == 0);

  for (int i = 0; i < 2; ++i) {  // the random Q, then warm start (with the error fed back)
    const at::Tensor out = step();
    CHECK(at::equal(out.slice(0, 0, 8), bias));
    CHECK(at::allclose(out.slice(0, 8).view({8, 6}), weight, 1e-5, 1e-5));
  }
  CHECK(comm.all_reduces == 2 + 2 * 3);  // uncompressed, Ps, Qs
  CHECK(state->iter() == 4);
  const auto stats = state->compression_stats();
  CHECK(stats.numel_before == 2 * (8 + 48));
  CHECK(stats.numel_after == 2 * (8 + (8 + 6)));
  CHECK(stats.rate == doctest::Approx(56.0 / 22.0));

  // A rank-2 gradient comes back as a rank-1 matrix: the compression is not a no-op.
  const at::Tensor two = weight + at::outer(at::linspace(1, -1, 8), at::linspace(2, 0, 6));
  GradBucket bucket{0, at::cat({bias, two.flatten()}), params, /*is_last=*/true};
  const at::Tensor out = hook(comm, bucket).wait().slice(0, 8).view({8, 6});
  CHECK(!at::allclose(out, two, 1e-3, 1e-3));
  const at::Tensor singular = at::linalg_svdvals(out);
  CHECK(singular[1].item<double>() < 1e-5 * singular[0].item<double>());
}
