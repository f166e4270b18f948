// run/launch_env.cpp: the launcher's variables, parsed; a bad one is named.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/launch_env.hpp"

using namespace ddprun;

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
