// run/distributed_sampler.cpp: PyTorch's DistributedSampler indices, and set_epoch through the
// copy a data loader keeps.
#include <cstdint>
#include <set>
#include <vector>

#include "ddprun/distributed_sampler.hpp"

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
