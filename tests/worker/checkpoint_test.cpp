// The pure parts of checkpoint.cpp: which folder a Checkpointer given none uses, and which file
// is the newest checkpoint.
#include <doctest/doctest.h>

#include <map>

#include "ddprun/checkpoint.hpp"

namespace {

ddprun::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("default_checkpoint_dir: DDPRUN_SNAPSHOT_DIR when set and not empty, else the fallback") {
  struct Row {
    std::map<std::string, std::string> env;
    std::string fallback;
    std::string expected;
  };
  const Row rows[] = {
      {{}, "checkpoints", "checkpoints"},  // started alone, or by torchrun
      {{{"DDPRUN_SNAPSHOT_DIR", "/dev/shm/ddprun-snapshots.1000.42"}}, "checkpoints", "/dev/shm/ddprun-snapshots.1000.42"},
      {{{"DDPRUN_SNAPSHOT_DIR", ""}}, "checkpoints", "checkpoints"},  // set but empty: none
      {{{"DDPRUN_SNAPSHOT_DIR", "/dev/shm/s"}}, "/data/run7", "/dev/shm/s"},
      {{{"RANK", "0"}}, "/data/run7", "/data/run7"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.fallback);
    CHECK(ddprun::default_checkpoint_dir(row.fallback, env_of(row.env)).string() == row.expected);
  }
}

TEST_CASE("newest_checkpoint: the highest step among complete checkpoints; temporaries and others ignored") {
  CHECK_FALSE(ddprun::newest_checkpoint({}).has_value());
  CHECK_FALSE(ddprun::newest_checkpoint({".checkpoint-000000004.pt.tmp.host.12", "notes.txt"}).has_value());
  CHECK(ddprun::newest_checkpoint({ddprun::checkpoint_file_name(2), ddprun::checkpoint_file_name(10),
                                   ".checkpoint-000000011.pt.tmp.host.7", ddprun::checkpoint_file_name(9)}) == 10);
  CHECK(ddprun::checkpoint_file_name(3) == "checkpoint-000000003.pt");
}
