// ddp/bucket_plan.cpp: which parameters share a bucket, in which order.
#include <cstddef>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/bucket_plan.hpp"

using namespace ddprun;

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
