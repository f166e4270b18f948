#include <doctest/doctest.h>

#include <algorithm>
#include <optional>

#include "process/worker_environment.hpp"

using namespace ddprun;

namespace {

std::map<std::string, std::string> as_map(const std::vector<std::string>& vars) {
  std::map<std::string, std::string> m;
  for (const auto& v : vars) m[v.substr(0, v.find('='))] = v.substr(v.find('=') + 1);
  return m;
}

}  // namespace

TEST_CASE("every worker gets torchrun's environment contract") {
  config::LaunchConfig cfg;
  cfg.nproc_per_node = 4;
  cfg.max_restarts = 3;
  cfg.role = "trainer";
  elastic::RoundAssignment round;
  round.round = 2;
  round.restart_count = 1;
  round.group_rank = 1;
  round.group_world_size = 2;
  round.base_rank = 4;
  round.world_size = 8;
  round.master_addr = "node0";
  round.master_port = 29555;
  round.run_id = "job42";
  round.agent_store = true;
  const auto env = as_map(launcher::worker_environment({{"PATH", "/bin"}, {"RANK", "stale"}}, cfg,
                                                        round, 3, {"/tmp/e.json", "/tmp/hb", "", ""}));
  const std::map<std::string, std::string> expected = {
      {"PATH", "/bin"},
      {"RANK", "7"},
      {"DDPRUN_HEARTBEAT_FILE", "/tmp/hb"},
      {"LOCAL_RANK", "3"},
      {"GROUP_RANK", "1"},
      {"ROLE_RANK", "7"},
      {"ROLE_NAME", "trainer"},
      {"ROLE_WORLD_SIZE", "8"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"WORLD_SIZE", "8"},
      {"GROUP_WORLD_SIZE", "2"},
      {"MASTER_ADDR", "node0"},
      {"MASTER_PORT", "29555"},
      {"TORCHELASTIC_RESTART_COUNT", "1"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job42"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"OMP_NUM_THREADS", "1"},
  };
  CHECK(env == expected);
  round.agent_store = false;  // TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 on the node of rank 0
  CHECK(as_map(launcher::worker_environment({}, cfg, round, 3, {})).at("TORCHELASTIC_USE_AGENT_STORE") == "False");
}

TEST_CASE("inherited OMP_NUM_THREADS and TORCH_NCCL_ASYNC_ERROR_HANDLING are kept") {
  config::LaunchConfig cfg;
  cfg.nproc_per_node = 2;
  const std::map<std::string, std::string> base = {{"OMP_NUM_THREADS", "4"},
                                                   {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  const auto env = as_map(launcher::worker_environment(base, cfg, {}, 0, {}));
  CHECK(env.at("OMP_NUM_THREADS") == "4");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK_FALSE(launcher::sets_omp_num_threads(base, cfg));
  cfg.nproc_per_node = 1;
  CHECK_FALSE(launcher::sets_omp_num_threads({}, cfg));  // one worker: nothing to oversubscribe
  CHECK(as_map(launcher::worker_environment({}, cfg, {}, 0, {})).count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("NCCL async error handling under both names: inherited, else the other name's value, else 1") {
  config::LaunchConfig cfg;
  struct Case {
    std::map<std::string, std::string> base;
    std::string current;  // TORCH_NCCL_ASYNC_ERROR_HANDLING, read by PyTorch 2.2 and later
    std::string old;      // NCCL_ASYNC_ERROR_HANDLING, the only name PyTorch 2.1 and earlier read
  };
  const std::vector<Case> cases = {
      {{}, "1", "1"},
      {{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}, {"NCCL_ASYNC_ERROR_HANDLING", "2"}}, "0", "2"},
      {{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}, "3", "3"},
      {{{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, "0", "0"},
      {{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", ""}}, "", ""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.current);
    CAPTURE(c.old);
    const auto env = as_map(launcher::worker_environment(c.base, cfg, {}, 0, {}));
    CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == c.current);
    CHECK(env.at("NCCL_ASYNC_ERROR_HANDLING") == c.old);
  }
}

TEST_CASE("a Python worker's PYTHONPATH starts with ddprun's bootstrap folder, followed by the inherited one") {
  config::LaunchConfig cfg;
  struct Case {
    std::map<std::string, std::string> base;
    std::string bootstrap;           // WorkerFiles::python_bootstrap ("": not a Python worker, or --progress=off)
    std::optional<std::string> got;  // PYTHONPATH; nullopt: unset
  };
  const std::vector<Case> cases = {
      {{}, "/p/share/ddprun/python", "/p/share/ddprun/python"},
      {{{"PYTHONPATH", "/mine:/other"}}, "/p/share/ddprun/python", "/p/share/ddprun/python:/mine:/other"},
      // An empty PYTHONPATH means nothing to Python; "folder:" would add the current directory.
      {{{"PYTHONPATH", ""}}, "/b", "/b"},
      {{}, "", std::nullopt},
      {{{"PYTHONPATH", "/mine"}}, "", "/mine"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.bootstrap);
    launcher::WorkerFiles files;
    files.python_bootstrap = c.bootstrap;
    const auto env = as_map(launcher::worker_environment(c.base, cfg, {}, 0, files));
    const auto it = env.find("PYTHONPATH");
    CHECK((it == env.end() ? std::nullopt : std::optional<std::string>(it->second)) == c.got);
  }
}
