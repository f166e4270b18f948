#include <cstdio>
#include <set>
#include <unistd.h>
#include <csignal>
#include <cstdlib>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"
#include "resolve_testing.hpp"

using namespace ddprun::config;

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
  CHECK(c.output_stall_timeout == 30);
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

TEST_CASE("Python workers (--progress): a Python program, or an interpreter named as the program") {
  struct Case {
    RawOptions cli;
    std::vector<std::string> program;
    bool python;
  };
  const std::vector<Case> cases = {
      {{}, {"train.py"}, true},
      {{{"module", "1"}}, {"pkg.train"}, true},
      {{{"run_path", "1"}}, {"train"}, true},
      {{{"no_python", "1"}}, {"python3", "train.py"}, true},
      {{{"no_python", "1"}}, {"/usr/bin/python3.11", "train.py"}, true},
      {{}, {"python"}, true},
      {{{"no_python", "1"}}, {"tool.py"}, false},
      {{}, {"./train"}, false},
      {{}, {"python-config"}, false},
      {{}, {"/opt/python3/bin/train"}, false},
      {{}, {"pythonic"}, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.program[0]);
    CHECK(resolve(c.cli, {}, {}, c.program).python_workers() == c.python);
  }
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

TEST_CASE("torchrun 2.11's last options: defaults, values, and what is refused") {
  const auto c = resolve({});
  CHECK(c.signals_to_handle == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(c.stop_signals == std::set<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK_FALSE(c.virtual_local_rank);
  CHECK(c.numa_binding.empty());
  CHECK(c.duplicate_stdout_filters.empty());
  CHECK_FALSE(c.duplicates_lines());

  const auto s = resolve({{"signals_to_handle", " SIGUSR1 ,SIGTERM"}});
  CHECK(s.stop_signals == std::set<int>{SIGUSR1, SIGTERM});
  CHECK(s.signals_to_handle == " SIGUSR1 ,SIGTERM");  // the workers see it as given, as with torchrun
  CHECK(resolve({}, {}, {{"virtual_local_rank", "1"}}).virtual_local_rank);
  CHECK(resolve({{"numa_binding", "core-complex"}}).numa_binding == "core-complex");
  // PET_LOGS_SPECS / --config: torchrun's defaults are accepted.
  CHECK_NOTHROW(resolve({}, {{"logs_specs", "default"}}, {{"event_log_handler", "null"}}));

  struct Filters {
    std::string text;
    std::vector<std::string> filters;
  };
  // torchrun's comma_separated_list: ",," is a comma; an empty item matches every line.
  const std::vector<Filters> filters = {
      {"", {}},
      {"apple", {"apple"}},
      {"apple,orange", {"apple", "orange"}},
      {"a,,b,c", {"a,b", "c"}},
      {"a,", {"a", ""}},
  };
  for (const auto& f : filters) {
    CAPTURE(f.text);
    const auto d = resolve({{"duplicate_stderr_filters", f.text}});
    CHECK(d.duplicate_stderr_filters == f.filters);
    CHECK(d.duplicate_stdout_filters.empty());
    // --print_config's value reads back the same.
    CHECK(resolve({{"duplicate_stderr_filters", to_json(d)["duplicate_stderr_filters"].is_null()
                                                    ? std::string()
                                                    : to_json(d)["duplicate_stderr_filters"].get<std::string>()}})
              .duplicate_stderr_filters == f.filters);
  }
}

TEST_CASE("--virtual_local_rank needs an entry of CUDA_VISIBLE_DEVICES per worker") {
  ResolveContext context;
  context.gpu_count = 0;
  context.environ = {{"CUDA_VISIBLE_DEVICES", "3"}};
  const OptionSources sources{{}, {}, {}, {{"virtual_local_rank", "1"}, {"nproc_per_node", "2"}}};
  CHECK_THROWS_WITH_AS(resolve_config(sources, {"t"}, context),
                       doctest::Contains("--virtual_local_rank: CUDA_VISIBLE_DEVICES=3 lists 1 GPU(s) for 2 workers"),
                       UsageError);
  context.environ = {{"CUDA_VISIBLE_DEVICES", "3,4"}};
  CHECK(resolve_config(sources, {"t"}, context).virtual_local_rank);
}

TEST_CASE("bad input names the option and what is accepted") {
  struct Case {
    RawOptions cli;
    std::vector<std::string> program;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {{{"nproc_per_node", "0"}}, {"t"}, "--nproc_per_node=0: expected a number of workers (1 or more), gpu, cpu or auto"},
      {{{"signals_to_handle", "SIGTERM,SIGKILL"}}, {"t"}, "--signals_to_handle=SIGTERM,SIGKILL: SIGKILL is not a signal ddprun handles; expected names among SIGTERM"},
      {{{"signals_to_handle", "SIGTERM,"}}, {"t"}, "--signals_to_handle=SIGTERM,: an empty name is not a signal"},
      {{{"numa_binding", "rack"}}, {"t"}, "--numa_binding=rack: expected node, socket, exclusive or core-complex"},
      {{{"logs_specs", "mine"}}, {"t"}, "--logs_specs=mine: names a Python plug-in of torchrun's, which ddprun cannot load; only 'default' is accepted"},
      {{{"event_log_handler", "console"}}, {"t"}, "--event_log_handler=console: names a Python event handler of torchrun's, which ddprun cannot run; only 'null' is accepted"},
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
      {{{"rdzv_backend", "zookeeper"}}, {"t"}, "--rdzv_backend=zookeeper: expected static, c10d"},
      {{{"rdzv_backend", "etcd-v2"}}, {"t"}, "--rdzv_backend=etcd-v2: etcd's v2 API is gone from etcd 3.6 on"},
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

TEST_CASE("--print_config output is itself a valid --config file") {
  const auto c = resolve({{"nproc_per_node", "2"}, {"nnodes", "1:1"}, {"tee", "0:1"}, {"progress_pattern", "^a\n^b"}}, {}, {},
                         {"train", "--epochs", "2"});
  const auto j = to_json(c);
  CHECK(j["nproc_per_node"] == 2);
  CHECK(j["args"] == nlohmann::json::array({"--epochs", "2"}));
  RawOptions back;
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;
    if (key == "args") back[key] = value.dump();
    else if (value.is_array()) {  // a repeatable option, as options_from_json_file() reads it
      for (const auto& item : value) back[key] += (back[key].empty() ? "" : "\n") + item.get<std::string>();
    }
    else if (value.is_boolean()) back[key] = value.get<bool>() ? "1" : "0";
    else if (value.is_string()) back[key] = value.get<std::string>();
    else back[key] = value.dump();
  }
  const auto again = resolve({}, back, {}, {});
  CHECK(to_json(again) == j);
}

TEST_CASE("--print_config writes every option of the table, and reads back through a real --config file") {
  char path[] = "/tmp/ddprun_print_config_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  const std::vector<RawOptions> configs = {
      {},
      {{"nnodes", "2:4"},
       {"node_rank", "1"},
       {"rdzv_backend", "c10d"},
       {"rdzv_endpoint", "h:1"},
       {"rdzv_id", "j"},
       {"hang_timeout", "auto:45"},
       {"restart_window", "60"},
       {"local_ranks_filter", "0"},
       {"status_port", "0"},
       {"duplicate_stdout_filters", "a,,b,c"},
       {"numa_binding", "socket"},
       {"snapshot_signal", "usr2"},
       {"snapshot_grace", "2.5"},
       {"logs_specs", "default"}},
      {{"standalone", "yes"},
       {"hang_timeout", "12.5"},
       {"progress", "off"},
       {"module", "on"},
       {"tee", "0:3,1:1"},
       {"warm_start", "on"},
       {"preload", "numpy,my_pkg.models"},
       {"snapshot", "off"},
       {"snapshot_dir_size", "1536M"},
       {"snapshot_keep", "1"},
       {"max_restarts", "3"},
       {"chaos", "mtbf=30,kinds=kill,hang"},  // no seed: the one chosen is written, and reads back
       {"failure_rules", R"([{"pattern": "Xid", "kind": "gpu_fault", "retryable": false}])"}},
  };
  for (const auto& options : configs) {
    const auto j = to_json(resolve(options, {}, {}, {"train", "--lr", "0.1"}));
    std::set<std::string> keys;
    for (const auto& [key, value] : j.items()) keys.insert(key);
    std::set<std::string> expected = {"program", "args"};
    for (const auto& spec : option_specs()) expected.insert(spec.key);
    CHECK(keys == expected);
    {
      std::FILE* file = std::fopen(path, "w");
      REQUIRE(file != nullptr);
      std::fputs(j.dump(2).c_str(), file);
      std::fclose(file);
    }
    const OptionSources from_file{{}, {}, options_from_json_file(path), {}};
    ResolveContext context;
    context.gpu_count = 0;
    CHECK(to_json(resolve_config(from_file, {}, context)) == j);
  }
  std::remove(path);
}

TEST_CASE("flags: one meaning of true and false, whichever source gives them") {
  struct Case {
    RawOptions cli, file, env;
    bool standalone;
  };
  const std::vector<Case> cases = {
      {{{"standalone", "1"}}, {}, {}, true},
      {{{"standalone", "yes"}}, {}, {}, true},
      {{}, {{"standalone", "True"}}, {}, true},
      {{}, {}, {{"standalone", "on"}}, true},
      {{}, {}, {{"standalone", "y"}}, true},
      {{}, {}, {{"standalone", "0"}}, false},
      {{}, {}, {{"standalone", "off"}}, false},
      {{}, {}, {{"standalone", ""}}, false},  // an empty flag is an unset one
      {{{"standalone", "0"}}, {}, {{"standalone", "1"}}, false},
  };
  for (const auto& c : cases) {
    CHECK(resolve(c.cli, c.file, c.env).standalone == c.standalone);
  }
  CHECK(usage_error({{"debug", "2"}}) == "--debug=2: expected true or false (or 1/0, yes/no, on/off)");
  CHECK(usage_error({}, {{"no_python", "nope"}}) == "PET_NO_PYTHON=nope: expected true or false (or 1/0, yes/no, on/off)");
}

// Issue 16: the fault sweep's inputs. Each is one short line naming the option, never a crash
// (std::regex recursed once per character) or a value that wraps around.
TEST_CASE("hostile values are refused with one short line naming the option") {
  const std::string digits(100000, '9');
  std::string long_streams;
  for (int i = 0; i < 30000; ++i) long_streams += "0:1,";
  long_streams += "x";
  struct Case {
    RawOptions cli;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {{{"nnodes", digits}}, "--nnodes=999"},
      {{{"nnodes", "1:" + digits}}, "--nnodes=1:999"},
      {{{"nnodes", "1:2:3"}}, "--nnodes=1:2:3: expected a number of nodes"},
      {{{"nproc_per_node", digits}}, "--nproc_per_node=999"},
      {{{"max_restarts", digits}}, "--max_restarts=999"},
      {{{"redirects", long_streams}}, "--redirects=0:1,0:1"},
      {{{"tee", "0:1,"}}, "--tee=0:1,: expected"},
      {{{"tee", "0:4"}}, "--tee=0:4: expected"},
      {{{"tee", "99999999:1"}}, "--tee=99999999:1: expected"},
      {{{"shutdown_timeout", "inf"}}, "--shutdown_timeout=inf: expected a number of seconds (0 or more), at most 1000000000"},
      {{{"shutdown_timeout", "nan"}}, "--shutdown_timeout=nan: expected"},
      {{{"shutdown_timeout", "1e308"}}, "--shutdown_timeout=1e308: expected"},
      {{{"shutdown_timeout", "1e10"}}, "--shutdown_timeout=1e10: expected"},
      {{{"shutdown_timeout", "-1"}}, "--shutdown_timeout=-1: expected"},
      {{{"shutdown_timeout", digits}}, "--shutdown_timeout=999"},
      {{{"monitor_interval", "1e400"}}, "--monitor_interval=1e400: expected"},
      {{{"hang_timeout", "1e10"}}, "--hang_timeout=1e10: expected"},
      {{{"hang_timeout", "auto:inf"}}, "--hang_timeout=auto:inf: expected"},
      {{{"hang_startup", "inf"}}, "--hang_startup=inf: expected"},
      {{{"chaos", "mtbf=0"}, {"max_restarts", "3"}}, "--chaos=mtbf=0: mtbf=0 is not seconds more than 0; accepted:"},
      {{{"chaos", "mtbf=5"}}, "--chaos=mtbf=5: a rehearsal injects failures for the job to recover from"},
      {{{"chaos", "mtbf=5,kinds=hang"}, {"max_restarts", "3"}}, "--chaos=mtbf=5,kinds=hang: kinds=hang stops a worker"},
      {{{"chaos", "mtbf=5,kinds=node"}, {"max_restarts", "3"}}, "--chaos=mtbf=5,kinds=node: kinds=node kills a node's"},
      {{{"output_stall_timeout", "0"}}, "--output_stall_timeout=0: expected a number of seconds greater than 0"},
      {{{"output_stall_timeout", "soon"}}, "--output_stall_timeout=soon: expected"},
      {{{"master_addr", std::string(300, 'h')}}, "--master_addr=hhh"},
      {{{"status_addr", ""}}, "--status_addr=: expected a host name"},
      {{{"rdzv_id", std::string(100000, 'j')}}, "--rdzv_id=jjj"},
      {{{"rdzv_id", "a\nb"}}, "--rdzv_id=a?b: expected"},
      {{{"rdzv_backend", digits}}, "--rdzv_backend=999"},
      {{{"start_method", "x\ny"}}, "--start_method=x?y"},
      {{{"debug", digits}}, "--debug=999"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.expected);
    const std::string message = usage_error(c.cli);
    CHECK_MESSAGE(message.rfind(c.expected, 0) == 0, message);
    CHECK(message.size() < 300);
    CHECK(message.find('\n') == std::string::npos);
  }
  // The same values from PET_* variables name the variable, unless the command line overrides it.
  CHECK(usage_error({}, {{"nnodes", digits}}).rfind("PET_NNODES=999", 0) == 0);
  CHECK(usage_error({}, {{"shutdown_timeout", "inf"}}).rfind("PET_SHUTDOWN_TIMEOUT=inf: expected", 0) == 0);
  CHECK(usage_error({{"shutdown_timeout", "nan"}}, {{"shutdown_timeout", "inf"}}).rfind("--shutdown_timeout=nan", 0) == 0);
  CHECK(usage_error({}, {{"redirects", "9"}}).rfind("PET_REDIRECTS=9: expected", 0) == 0);
  CHECK(usage_error({{"redirects", "8"}}, {{"redirects", "9"}}).rfind("--redirects=8: expected", 0) == 0);
  // torchrun's own variable for --shutdown_timeout is named too (it was "--shutdown_timeout=soon").
  ResolveContext context;
  context.environ = {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}};
  const auto from_variable = [&](const OptionSources& sources) {
    try {
      resolve_config(sources, {"t"}, context);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(from_variable({}).rfind("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon: expected a number of seconds (0 or more)", 0) == 0);
  CHECK(from_variable({{}, {{"shutdown_timeout", "x"}}, {}, {}}).rfind("PET_SHUTDOWN_TIMEOUT=x: expected", 0) == 0);
  CHECK(from_variable({{}, {{"shutdown_timeout", "x"}}, {}, {{"shutdown_timeout", "y"}}}).rfind("--shutdown_timeout=y", 0) == 0);
}

TEST_CASE("the longest values that are valid are accepted") {
  CHECK(resolve({{"shutdown_timeout", "1e9"}}).shutdown_timeout == 1e9);
  CHECK(resolve({{"hang_timeout", "1e9"}}).hang_timeout.seconds == 1e9);
  CHECK(resolve({{"nnodes", "1048576"}, {"node_rank", "0"}}).max_nodes == 1 << 20);
  std::string many;
  for (int i = 0; i < 30000; ++i) many += (i ? "," : "") + std::to_string(i) + ":3";
  CHECK(resolve({{"redirects", many}}).redirects.per_rank.size() == 30000);
  CHECK(resolve({{"tee", "0:1,1:2"}}).tee.mask_for(1) == 2);
}
