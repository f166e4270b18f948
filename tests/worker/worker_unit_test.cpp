// The worker library's pure parts: sampler indices, bucket plan, launch environment, error file.
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "ddprun/bucket_plan.hpp"
#include "ddprun/distributed_sampler.hpp"
#include "ddprun/error_file.hpp"
#include "ddprun/launch_env.hpp"

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
