// torchrun's --rdzv_backend names, as a table.
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/rdzv_backend.hpp"

using namespace ddprun::config;

TEST_CASE("backend names: static, c10d and etcd; nothing else") {
  struct Row {
    std::string name;
    std::optional<RdzvBackend> backend;
  };
  const std::vector<Row> table = {
      {"static", RdzvBackend::kStatic}, {"c10d", RdzvBackend::kC10d}, {"etcd", RdzvBackend::kEtcd},
      {"etcd-v2", std::nullopt},        {"", std::nullopt},           {"Static", std::nullopt},
      {"c10d ", std::nullopt},
  };
  for (const auto& row : table) {
    CAPTURE(row.name);
    CHECK(parse_rdzv_backend(row.name) == row.backend);
  }
}
