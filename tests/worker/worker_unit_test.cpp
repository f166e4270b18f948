// The worker library's pure parts: sampler indices, bucket plan, launch environment, error file,
// PowerSGD's options and arithmetic (on a communicator that sums nothing: one rank).
#include <ATen/ATen.h>

#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "ddprun/bucket_plan.hpp"
#include "ddprun/distributed_sampler.hpp"
#include "ddprun/error_file.hpp"
#include "ddprun/launch_env.hpp"
#include "ddprun/powersgd_hook.hpp"

// libtorch defines a glog-style CHECK that aborts and is not counted: doctest's must win.
#undef CHECK
#include <doctest/doctest.h>

using namespace ddprun;

TEST_CASE("sampler: ranks partition the padded or truncated index list, as PyTorch's") {
  for (int64_t n : {1, 2, 5, 10, 11, 17, 64, 100, 101}) {
    for (int w : {1, 2, 3, 4, 7}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          CAPTURE(n);
          CAPTURE(w);
          CAPTURE(drop_last);
          CAPTURE(shuffle);
          const int64_t per_rank = (drop_last && n % w != 0) ? (n - w + w - 1) / w : (n + w - 1) / w;
          std::multiset<int64_t> all;
          for (int r = 0; r < w; ++r) {
            const SamplerSpec spec{n, w, r, shuffle, 5, drop_last};
            CHECK(samples_per_rank(spec) == per_rank);
            const auto idx = distributed_indices(spec, 3);
            CHECK(static_cast<int64_t>(idx.size()) == per_rank);
            all.insert(idx.begin(), idx.end());
            for (int64_t i : idx) CHECK((i >= 0 && i < n));
            CHECK(idx == distributed_indices(spec, 3));  // deterministic for (seed, epoch)
          }
          const std::set<int64_t> distinct(all.begin(), all.end());
          if (drop_last) {
            CHECK(distinct.size() == all.size());  // no duplicates
            CHECK(static_cast<int64_t>(all.size()) == per_rank * w);
          } else {
            CHECK(static_cast<int64_t>(distinct.size()) == n);  // every sample at least once
            CHECK(static_cast<int64_t>(all.size() - distinct.size()) == per_rank * w - n);  // padding
          }
        }
      }
    }
  }
}

TEST_CASE("sampler: PyTorch's own indices (n=11, seed 5, epoch 0, 2 ranks)") {
  // torch.utils.data.DistributedSampler(range(11), 2, r, seed=5) in python3-torch 1.13.
  CHECK((distributed_indices({11, 2, 0, true, 5, false}, 0) == std::vector<int64_t>{9, 0, 10, 3, 7, 4}));
  CHECK((distributed_indices({11, 2, 1, true, 5, false}, 0) == std::vector<int64_t>{5, 8, 2, 6, 1, 9}));
  CHECK((distributed_indices({5, 2, 1, false, 0, false}, 0) == std::vector<int64_t>{1, 3, 0}));
}

TEST_CASE("sampler: set_epoch reaches the loader's copy") {
  DistributedSampler sampler({16, 2, 0, true, 0, false});
  DistributedSampler copy = sampler;  // what make_data_loader keeps
  copy.reset();
  const auto first = copy.next(8).value();
  sampler.set_epoch(1);
  copy.reset();
  const auto second = copy.next(8).value();
  CHECK(first != second);
  const auto expected = distributed_indices({16, 2, 0, true, 0, false}, 1);
  CHECK(std::vector<int64_t>(second.begin(), second.end()) == expected);
}

TEST_CASE("bucket plan: reversed parameters, small first bucket, one dtype group at a time") {
  const std::vector<ParamSlot> params = {{400, 0}, {100, 0}, {400, 0}, {100, 0}, {400, 0}, {100, 0}};
  const auto buckets = plan_buckets(params, 150, 500);
  REQUIRE(buckets.size() == 3);
  CHECK((buckets[0].params == std::vector<std::size_t>{5, 4}));     // first closes at >= 150
  CHECK((buckets[1].params == std::vector<std::size_t>{3, 2}));     // then at >= 500
  CHECK((buckets[2].params == std::vector<std::size_t>{1, 0}));
  CHECK(buckets[0].bytes == 500);
  const auto mixed = plan_buckets({{100, 0}, {100, 1}, {100, 0}, {100, 1}}, 1000, 1000);
  REQUIRE(mixed.size() == 2);  // dtypes never share a bucket
  CHECK((mixed[0].params == std::vector<std::size_t>{3, 1}));
  CHECK((mixed[1].params == std::vector<std::size_t>{2, 0}));
}

TEST_CASE("launch environment: none means world size 1; bad values name the variable") {
  const auto lookup = [](std::map<std::string, std::string> vars) -> EnvLookup {
    return [vars](const char* name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  };
  const auto alone = parse_launch_env(lookup({}));
  CHECK_FALSE(alone.launched);
  CHECK(alone.world_size == 1);
  const auto e = parse_launch_env(lookup({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                          {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h0"},
                                          {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  CHECK(e.launched);
  CHECK(e.rank == 3);
  CHECK(e.local_rank == 1);
  CHECK(e.master_port == 29500);
  CHECK(e.restart_count == 2);
  CHECK(e.use_agent_store);
  struct Bad {
    std::map<std::string, std::string> vars;
    const char* variable;
  };
  const std::vector<Bad> bad = {
      {{{"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "WORLD_SIZE"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "MASTER_ADDR"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.variable);
    try {
      parse_launch_env(lookup(b.vars));
      FAIL("no error");
    } catch (const LaunchEnvError& error) {
      CHECK(error.variable() == b.variable);
      CHECK(std::string(error.what()).find(b.variable) != std::string::npos);
    }
  }
}

TEST_CASE("error file: PyTorch's @record format, read by ddprun and torchrun") {
  const auto doc = nlohmann::json::parse(error_file_json("std::runtime_error", "boom", "stack", 1700000000));
  CHECK(doc["message"]["message"] == "std::runtime_error: boom");
  CHECK(doc["message"]["extraInfo"]["py_callstack"] == "stack");
  CHECK(doc["message"]["extraInfo"]["timestamp"] == "1700000000");
}

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
