#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"
#include "ddprun/slurm_options.hpp"

using namespace ddprun::config;

namespace {

LaunchConfig resolve(const RawOptions& cli, const RawOptions& file = {}, const RawOptions& env = {},
                     std::vector<std::string> program = {"train"}) {
  ResolveContext context;
  context.cpu_count = 6;
  context.gpu_count = 0;
  return resolve_config({{}, env, file, cli}, program, context);
}

}  // namespace

TEST_CASE("defaults match torchrun") {
  const auto c = resolve({});
  CHECK(c.nproc_per_node == 1);
  CHECK(c.min_nodes == 1);
  CHECK(c.max_nodes == 1);
  CHECK(c.node_rank == -1);
  CHECK(c.master_addr == "127.0.0.1");
  CHECK(c.master_port == 0);
  CHECK(c.max_restarts == 0);
  CHECK(c.rdzv_backend == "static");
  CHECK(c.role == "default");
  CHECK(c.shutdown_timeout == 30);
  CHECK(c.program == "train");
}

TEST_CASE("nproc_per_node accepts numbers, cpu, gpu and auto") {
  CHECK(resolve({{"nproc_per_node", "4"}}).nproc_per_node == 4);
  CHECK(resolve({{"nproc_per_node", "cpu"}}).nproc_per_node == 6);
  CHECK(resolve({{"nproc_per_node", "auto"}}).nproc_per_node == 6);  // no GPU: one per core
  ResolveContext with_gpus;
  with_gpus.gpu_count = 2;
  CHECK(resolve_config({{}, {}, {}, {{"nproc_per_node", "gpu"}}}, {"t"}, with_gpus).nproc_per_node == 2);
  CHECK(resolve_config({{}, {}, {}, {{"nproc_per_node", "auto"}}}, {"t"}, with_gpus).nproc_per_node == 2);
}

TEST_CASE("precedence: command line, then --config file, then PET_*, then default") {
  CHECK(resolve({}, {}, {{"max_restarts", "1"}}).max_restarts == 1);
  CHECK(resolve({}, {{"max_restarts", "2"}}, {{"max_restarts", "1"}}).max_restarts == 2);
  CHECK(resolve({{"max_restarts", "3"}}, {{"max_restarts", "2"}}, {{"max_restarts", "1"}}).max_restarts == 3);
}

TEST_CASE("inferred options yield to everything the user gave") {
  ResolveContext context;
  context.gpu_count = 0;
  OptionSources sources;
  sources.inferred = {{"nnodes", "2"}, {"node_rank", "1"}, {"max_restarts", "7"}};
  sources.env = {{"max_restarts", "1"}};
  const auto c = resolve_config(sources, {"t"}, context);
  CHECK(c.max_nodes == 2);
  CHECK(c.node_rank == 1);
  CHECK(c.max_restarts == 1);
  CHECK(sources.given("max_restarts"));
  CHECK_FALSE(sources.given("nnodes"));
}

TEST_CASE("SLURM's rendezvous endpoint: several nodes only, and never over the user's master flags") {
  ddprun::slurm::SlurmInference slurm;
  slurm.in_slurm = true;
  slurm.master_addr = "n1";
  struct Case {
    const char* what;
    int slurm_nodes;
    RawOptions cli;
    bool endpoint;  // n1:29400 inferred
  };
  const std::vector<Case> cases = {
      {"two nodes", 2, {}, true},
      // On one node a static endpoint would be MASTER_ADDR:MASTER_PORT, a fixed port.
      {"one node", 1, {}, false},
      {"one SLURM node, --nnodes=2", 1, {{"nnodes", "2"}}, true},
      {"two SLURM nodes, --nnodes=1", 2, {{"nnodes", "1"}}, false},
      {"elastic --nnodes=1:2", 1, {{"nnodes", "1:2"}}, true},
      // Static: an endpoint would replace the user's --master_addr/--master_port.
      {"two nodes, --master_port", 2, {{"master_port", "29600"}}, false},
      {"two nodes, --master_addr", 2, {{"master_addr", "n2"}}, false},
      {"two nodes, c10d, --master_port", 2, {{"rdzv_backend", "c10d"}, {"master_port", "29600"}}, true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    slurm.nnodes = c.slurm_nodes;
    OptionSources given;
    given.cli = c.cli;
    const RawOptions inferred = options_from_slurm(slurm, given);
    CHECK(inferred.at("master_addr") == "n1");
    CHECK(inferred.count("rdzv_endpoint") == (c.endpoint ? 1u : 0u));
    if (c.endpoint) CHECK(inferred.at("rdzv_endpoint") == "n1:29400");
  }
}

TEST_CASE("PET_ variables name options") {
  const auto opts = options_from_environment(
      {{"PET_NPROC_PER_NODE", "4"}, {"PET_STANDALONE", "1"}, {"PET_BOGUS", "x"}, {"PATH", "/bin"}});
  CHECK(opts.size() == 2);
  CHECK(opts.at("nproc_per_node") == "4");
  CHECK(opts.at("standalone") == "1");
}

TEST_CASE("nnodes and node_rank") {
  const auto c = resolve({{"nnodes", "2:4"}, {"node_rank", "3"}});
  CHECK(c.min_nodes == 2);
  CHECK(c.max_nodes == 4);
  CHECK(c.node_rank == 3);
  CHECK(c.multi_node());
}

TEST_CASE("redirects, tee and the local rank filter") {
  const auto c = resolve({{"nproc_per_node", "4"}, {"redirects", "3"}, {"tee", "0:1,2:2"},
                          {"local_ranks_filter", "0,2"}});
  CHECK(c.redirects.mask_for(3) == 3);
  CHECK(c.tee.mask_for(0) == 1);
  CHECK(c.tee.mask_for(1) == 0);
  CHECK(c.tee.mask_for(2) == 2);
  CHECK(*c.local_ranks_filter == std::set<int>{0, 2});
}

TEST_CASE("python programs run under the interpreter, as with torchrun") {
  auto c = resolve({}, {}, {}, {"train.py", "--lr", "0.1"});
  CHECK(c.worker_argv("python3") == std::vector<std::string>{"python3", "-u", "train.py", "--lr", "0.1"});
  c = resolve({{"module", "1"}}, {}, {}, {"pkg.train"});
  CHECK(c.worker_argv("py") == std::vector<std::string>{"py", "-u", "-m", "pkg.train"});
  c = resolve({{"no_python", "1"}}, {}, {}, {"tool.py"});
  CHECK(c.worker_argv("py") == std::vector<std::string>{"tool.py"});
  c = resolve({}, {}, {}, {"./train", "-m"});
  CHECK(c.worker_argv("py") == std::vector<std::string>{"./train", "-m"});
}

TEST_CASE("the interpreter: PYTHON_EXEC, else the pip package's own Python, else python3 from PATH") {
  using Env = std::map<std::string, std::string>;
  CHECK(python_interpreter(Env{}).program == "python3");
  CHECK(python_interpreter(Env{{"DDPRUN_DEFAULT_PYTHON", "/venv/bin/python"}}).program == "/venv/bin/python");
  const auto both = python_interpreter(Env{{"DDPRUN_DEFAULT_PYTHON", "/venv/bin/python"}, {"PYTHON_EXEC", "/opt/py"}});
  CHECK(both.program == "/opt/py");
  CHECK(both.chosen_by == "set by PYTHON_EXEC");
  CHECK(python_interpreter(Env{{"PYTHON_EXEC", ""}}).program == "python3");  // empty: unset
}

TEST_CASE("bad input names the option and what is accepted") {
  struct Case {
    RawOptions cli;
    std::vector<std::string> program;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {{{"nproc_per_node", "0"}}, {"t"}, "--nproc_per_node=0: expected a number of workers (1 or more), gpu, cpu or auto"},
      {{{"nproc_per_node", "-2"}}, {"t"}, "--nproc_per_node=-2: expected"},
      {{{"nproc_per_node", "four"}}, {"t"}, "--nproc_per_node=four: expected"},
      {{{"nproc_per_node", "gpu"}}, {"t"}, "--nproc_per_node=gpu: no GPU visible"},
      {{{"nnodes", "0"}}, {"t"}, "--nnodes=0: expected 1 or more nodes"},
      {{{"nnodes", "4:2"}}, {"t"}, "--nnodes=4:2: MIN is larger than MAX"},
      {{{"nnodes", "x"}}, {"t"}, "--nnodes=x: expected a number of nodes N or MIN:MAX"},
      {{{"nnodes", "2"}, {"node_rank", "2"}}, {"t"}, "--node_rank=2: must be less than --nnodes (2), i.e. 0..1"},
      {{{"master_port", "0"}}, {"t"}, "--master_port=0: expected a port in 1..65535"},
      {{{"master_port", "65536"}}, {"t"}, "--master_port=65536: expected a port in 1..65535"},
      {{{"max_restarts", "-1"}}, {"t"}, "--max_restarts=-1: expected a number of restarts, 0 or more"},
      {{{"monitor_interval", "0"}}, {"t"}, "--monitor_interval=0: expected a number of seconds greater than 0"},
      {{{"shutdown_timeout", "soon"}}, {"t"}, "--shutdown_timeout=soon: expected a number of seconds"},
      {{{"redirects", "4"}}, {"t"}, "--redirects=4: expected 0 (none), 1 (stdout), 2 (stderr), 3 (both)"},
      {{{"local_ranks_filter", "5"}}, {"t"}, "--local_ranks_filter=5: expected local ranks 0..0"},
      {{{"rdzv_backend", "etcd"}}, {"t"}, "--rdzv_backend=etcd: expected static or c10d"},
      {{{"module", "1"}, {"no_python", "1"}}, {"t"}, "-m/--module and --no_python cannot be used together"},
      {{{"standalone", "1"}, {"nnodes", "2"}}, {"t"}, "--standalone runs one node"},
      {{{"debug", "1"}, {"nproc_per_node", "2"}}, {"t"}, "--debug runs one worker; drop --nproc_per_node=2"},
      {{}, {}, "missing PROGRAM: usage is ddprun [options] PROGRAM [ARGS...]"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.expected);
    std::string message;
    try {
      resolve(c.cli, {}, {}, c.program);
    } catch (const UsageError& e) {
      message = e.what();
    }
    CHECK(message.rfind(c.expected, 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("--config files") {
  const std::string data = DDPRUN_TEST_DATA;
  const auto opts = options_from_json_file(data + "/good.json");
  CHECK(opts.at("nproc_per_node") == "3");
  CHECK(opts.at("max_restarts") == "2");
  CHECK(opts.at("standalone") == "1");
  CHECK(opts.count("rdzv_id") == 0);  // null: unset

  const auto message = [](const std::string& path) {
    try {
      options_from_json_file(path);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message(data + "/missing.json").find("cannot open the file") != std::string::npos);
  CHECK(message(data + "/not_json.json").find("not valid JSON") != std::string::npos);
  CHECK(message(data + "/unknown_key.json").find("unknown key \"nprocs\"") != std::string::npos);
  CHECK(message(data + "/bad_type.json").find("\"tee\" must be a string, number or boolean") != std::string::npos);
}

TEST_CASE("--print_config output is itself a valid --config file") {
  const auto c = resolve({{"nproc_per_node", "2"}, {"nnodes", "1:1"}, {"tee", "0:1"}}, {}, {},
                         {"train", "--epochs", "2"});
  const auto j = to_json(c);
  CHECK(j["nproc_per_node"] == 2);
  CHECK(j["args"] == nlohmann::json::array({"--epochs", "2"}));
  RawOptions back;
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;
    if (key == "args") back[key] = value.dump();
    else if (value.is_boolean()) back[key] = value.get<bool>() ? "1" : "0";
    else if (value.is_string()) back[key] = value.get<std::string>();
    else back[key] = value.dump();
  }
  const auto again = resolve({}, back, {}, {});
  CHECK(to_json(again) == j);
}

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
