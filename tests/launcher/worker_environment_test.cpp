#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <optional>

#include "ddprun/worker_env.hpp"
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
                                                        round, 3, {"/tmp/e.json", "/tmp/hb", "", "", "", ""}));
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
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
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

TEST_CASE("NCCL async error handling: the new name always, the old one only where the worker cannot choose") {
  config::LaunchConfig cfg;
  struct Case {
    std::map<std::string, std::string> base;
    bool bootstrap;  // a Python worker with ddprun's bootstrap, which sets the old name for torch < 2.2
    std::string current;              // TORCH_NCCL_ASYNC_ERROR_HANDLING, read by PyTorch 2.2 and later
    std::optional<std::string> old;   // NCCL_ASYNC_ERROR_HANDLING, the only name PyTorch 2.1 and earlier read
  };
  const std::vector<Case> cases = {
      {{}, false, "1", "1"},
      {{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}, {"NCCL_ASYNC_ERROR_HANDLING", "2"}}, false, "0", "2"},
      {{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}, false, "3", "3"},
      {{{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, false, "0", "0"},
      {{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", ""}}, false, "", ""},
      // PyTorch 2.2 and later warn about the old name: not set for a worker that sets it itself.
      {{}, true, "1", std::nullopt},
      {{{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}, true, "3", std::nullopt},
      // ... unless the user set it: theirs is inherited.
      {{{"NCCL_ASYNC_ERROR_HANDLING", "0"}}, true, "0", "0"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.current);
    CAPTURE(c.bootstrap);
    launcher::WorkerFiles files;
    if (c.bootstrap) files.python_bootstrap = "/p/share/ddprun/python";
    const auto env = as_map(launcher::worker_environment(c.base, cfg, {}, 0, files));
    CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == c.current);
    const auto old = env.find("NCCL_ASYNC_ERROR_HANDLING");
    CHECK((old == env.end() ? std::nullopt : std::optional<std::string>(old->second)) == c.old);
  }
}

TEST_CASE("--virtual_local_rank: LOCAL_RANK 0 and the worker's own GPU, as torchrun 2.11") {
  struct Case {
    std::map<std::string, std::string> base;
    bool virtual_local_rank;
    int local_rank;
    std::string local_rank_seen;
    std::optional<std::string> visible;  // CUDA_VISIBLE_DEVICES the worker sees
  };
  const std::vector<Case> cases = {
      {{}, false, 1, "1", std::nullopt},
      {{{"CUDA_VISIBLE_DEVICES", "4,6"}}, false, 1, "1", "4,6"},
      {{}, true, 1, "0", "1"},
      {{{"CUDA_VISIBLE_DEVICES", "4,6"}}, true, 0, "0", "4"},
      {{{"CUDA_VISIBLE_DEVICES", "4, 6"}}, true, 1, "0", "6"},
      {{{"CUDA_VISIBLE_DEVICES", "GPU-a1,GPU-b2"}}, true, 1, "0", "GPU-b2"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.local_rank);
    CAPTURE(c.virtual_local_rank);
    config::LaunchConfig cfg;
    cfg.nproc_per_node = 2;
    cfg.virtual_local_rank = c.virtual_local_rank;
    const auto env = as_map(launcher::worker_environment(c.base, cfg, {}, c.local_rank, {}));
    CHECK(env.at("LOCAL_RANK") == c.local_rank_seen);
    const auto visible = env.find("CUDA_VISIBLE_DEVICES");
    CHECK((visible == env.end() ? std::nullopt : std::optional<std::string>(visible->second)) == c.visible);
  }
}

TEST_CASE("TORCHELASTIC_SIGNALS_TO_HANDLE is --signals_to_handle, as torchrun 2.11 sets it") {
  config::LaunchConfig cfg;
  CHECK(as_map(launcher::worker_environment({}, cfg, {}, 0, {})).at("TORCHELASTIC_SIGNALS_TO_HANDLE") ==
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  cfg.signals_to_handle = "SIGTERM,SIGUSR1";
  CHECK(as_map(launcher::worker_environment({}, cfg, {}, 0, {})).at("TORCHELASTIC_SIGNALS_TO_HANDLE") ==
        "SIGTERM,SIGUSR1");
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

TEST_CASE("with the bootstrap, the Python stacks file and the signal that asks for it; without, neither") {
  config::LaunchConfig cfg;
  launcher::WorkerFiles files;
  files.python_stacks = "/run/ddprun.1/rank_0.python_stacks";
  CHECK(as_map(launcher::worker_environment({}, cfg, {}, 0, files)).count("DDPRUN_PYTHON_STACKS_FILE") == 0);
  files.python_bootstrap = "/p/share/ddprun/python";
  const auto env = as_map(launcher::worker_environment({}, cfg, {}, 0, files));
  CHECK(env.at("DDPRUN_PYTHON_STACKS_FILE") == files.python_stacks);
  CHECK(env.at("DDPRUN_PYTHON_STACKS_SIGNAL") == std::to_string(env::python_stacks_signal()));
  CHECK(env::python_stacks_signal() >= SIGRTMIN);
  CHECK(env::python_stacks_signal() <= SIGRTMAX);
}

TEST_CASE("the interpreter options that keep the bootstrap out: -I, -E, -S, among others and combined") {
  struct Case {
    std::vector<std::string> args;  // the interpreter's, as after --no_python python3
    char option;
  };
  const std::vector<Case> cases = {
      {{"train.py", "-I"}, 0},                // the script's own argument
      {{"-I", "train.py"}, 'I'},
      {{"-E", "train.py"}, 'E'},
      {{"-S", "train.py"}, 'S'},
      {{"-uIB", "train.py"}, 'I'},           // combined
      {{"-u", "-X", "importtime", "-S", "x.py"}, 'S'},
      {{"-X", "I", "x.py"}, 0},              // -X's value, not an option
      {{"-XI", "x.py"}, 0},
      {{"-W", "ignore", "-E", "x.py"}, 'E'},
      {{"-Wignore", "x.py"}, 0},
      {{"-m", "-I"}, 0},                     // -m's module name
      {{"-c", "import sys", "-S"}, 0},
      {{"-mpkg", "-E"}, 0},
      {{"--check-hash-based-pycs", "always", "-I", "x.py"}, 'I'},
      {{"--", "-I"}, 0},
      {{"-", "-I"}, 0},                      // the program from stdin
      {{"-s", "x.py"}, 0},                   // no user site: sitecustomize still runs
      {{}, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args.size() > 0 ? c.args[0] : std::string());
    CHECK(launcher::python_option_without_bootstrap(c.args) == c.option);
  }
  for (char option : {'I', 'E', 'S'}) {
    const std::string line = launcher::without_bootstrap_line(option);
    CHECK(line.rfind(std::string("ddprun: python -") + option + " (", 0) == 0);
    CHECK(line.find("progress is not counted") != std::string::npos);
    CHECK(line.back() == '\n');
    CHECK(std::count(line.begin(), line.end(), '\n') == 1);
  }
}

TEST_CASE("the warm interpreter's environment: what every worker alike gets before its imports, no rank") {
  config::LaunchConfig cfg;
  cfg.nproc_per_node = 2;
  const std::map<std::string, std::string> base = {{"PATH", "/bin"},
                                                   {"PYTHONPATH", "/mine"},
                                                   {"TORCH_CPP_LOG_LEVEL", "INFO"},
                                                   {env::kRdzvSecret, "s3cret"}};
  const auto z = as_map(launcher::zygote_environment(base, cfg, "/boot", ""));
  CHECK(z.at("OMP_NUM_THREADS") == "1");  // as worker_environment() sets it for 2 workers
  CHECK(z.at("PYTHONPATH") == "/boot:/mine");
  CHECK(z.at("TORCH_CPP_LOG_LEVEL") == "INFO");
  CHECK(z.count(env::kRdzvSecret) == 0);
  for (const char* per_rank : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RESTART_COUNT"}) {
    CHECK(z.count(per_rank) == 0);
  }
  cfg.nproc_per_node = 1;
  const auto one = as_map(launcher::zygote_environment({{"PATH", "/bin"}}, cfg, "", ""));
  CHECK(one.count("OMP_NUM_THREADS") == 0);
  CHECK(one.count("PYTHONPATH") == 0);
}

TEST_CASE("DDPRUN_SNAPSHOT_DIR: the job's folder for every worker and the warm interpreter; none with --snapshot=off") {
  config::LaunchConfig cfg;
  struct Row {
    std::map<std::string, std::string> base;
    std::string snapshot_dir;  // "": --snapshot=off
    const char* expected;      // nullptr: unset
  };
  const std::vector<Row> rows = {
      {{}, "/dev/shm/ddprun-snapshots.0.job", "/dev/shm/ddprun-snapshots.0.job"},
      {{}, "", nullptr},
      // A ddprun started by a worker of another: the outer job's folder is not the inner job's.
      {{{"DDPRUN_SNAPSHOT_DIR", "/dev/shm/outer"}}, "/dev/shm/inner", "/dev/shm/inner"},
      {{{"DDPRUN_SNAPSHOT_DIR", "/dev/shm/outer"}}, "", nullptr},
  };
  for (const Row& row : rows) {
    launcher::WorkerFiles files;
    files.snapshot_dir = row.snapshot_dir;
    for (int local_rank : {0, 1}) {
      const auto worker = as_map(launcher::worker_environment(row.base, cfg, {}, local_rank, files));
      if (row.expected == nullptr) {
        CHECK(worker.count("DDPRUN_SNAPSHOT_DIR") == 0);
      } else {
        CHECK(worker.at("DDPRUN_SNAPSHOT_DIR") == row.expected);
      }
    }
    const auto zygote = as_map(launcher::zygote_environment(row.base, cfg, "", row.snapshot_dir));
    if (row.expected == nullptr) {
      CHECK(zygote.count("DDPRUN_SNAPSHOT_DIR") == 0);
    } else {
      CHECK(zygote.at("DDPRUN_SNAPSHOT_DIR") == row.expected);
    }
  }
}
