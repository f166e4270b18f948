// The GPU count a CUDA program sees, as a table (the probes themselves need a GPU machine).
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/launch_config.hpp"

using namespace ddprun::config;

TEST_CASE("GPUs visible through CUDA_VISIBLE_DEVICES") {
  struct Row {
    int physical;
    std::optional<std::string> visible;
    int expected;
  };
  const std::vector<Row> table = {
      {4, std::nullopt, 4}, {4, "0,1", 2},      {4, "", 0},  {4, "-1", 0},
      {4, "1,-1,0", 1},     {2, "0,1,2,3", 2},  {0, "0", 0}, {8, "GPU-6f2a,GPU-77c1", 2},
  };
  for (const auto& row : table) {
    CAPTURE(row.visible.value_or("(unset)"));
    CHECK(visible_gpu_count(row.physical, row.visible) == row.expected);
  }
}
