// resolve_config()'s steps for the option groups that came after the first (launch_config.cpp's
// resolve_supervision, resolve_hangs, resolve_snapshots, resolve_program): each option from every
// source, its refusals and what --print_config writes. The merging, the modes and the bad input
// that spans options are launch_config_test.cpp's (split there at 500 lines).
#include <signal.h>

#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"
#include "resolve_testing.hpp"

using namespace ddprun::config;

TEST_CASE("--progress: on by default; on or off, from the command line, PET_PROGRESS or the config") {
  CHECK(resolve({}).progress);
  CHECK_FALSE(resolve({{"progress", "off"}}).progress);
  CHECK_FALSE(resolve({}, {}, {{"progress", "off"}}).progress);
  CHECK(resolve({{"progress", "on"}}, {{"progress", "off"}}).progress);
  // on and off are true and false as every flag reads them (parse.hpp).
  CHECK(resolve({{"progress", "yes"}}).progress);
  CHECK_FALSE(resolve({{"progress", "0"}}).progress);
  CHECK_THROWS_WITH(resolve({{"progress", "later"}}),
                    "--progress=later: expected true or false (or 1/0, yes/no, on/off)");
  CHECK(to_json(resolve({{"progress", "False"}}))["progress"] == "off");
}

TEST_CASE("--warm_start: auto by default; on, off or auto from the command line, PET_WARM_START or the config; --preload's names") {
  using W = LaunchConfig::WarmStart;
  CHECK(resolve({}).warm_start == W::kAuto);
  CHECK(resolve({{"warm_start", "on"}}).warm_start == W::kOn);
  CHECK(resolve({{"warm_start", "off"}}).warm_start == W::kOff);
  CHECK(resolve({{"warm_start", "0"}}).warm_start == W::kOff);
  CHECK(resolve({{"warm_start", "yes"}}).warm_start == W::kOn);
  CHECK(resolve({{"warm_start", "auto"}}).warm_start == W::kAuto);
  CHECK(resolve({}, {}, {{"warm_start", "on"}}).warm_start == W::kOn);
  CHECK(resolve({}, {{"warm_start", "on"}}, {{"warm_start", "off"}}).warm_start == W::kOn);
  CHECK(resolve({{"warm_start", "off"}}, {{"warm_start", "on"}}).warm_start == W::kOff);
  CHECK(options_from_environment({{"PET_WARM_START", "on"}, {"PET_PRELOAD", "numpy"}}) ==
        RawOptions{{"preload", "numpy"}, {"warm_start", "on"}});
  CHECK_THROWS_WITH(resolve({{"warm_start", "sometimes"}}),
                    "--warm_start=sometimes: expected auto, on or off (or true/false, 1/0, yes/no)");
  CHECK(to_json(resolve({}))["warm_start"] == "auto");
  CHECK(to_json(resolve({{"warm_start", "false"}}))["warm_start"] == "off");
  CHECK(to_json(resolve({}))["preload"].is_null());
  // auto forks restarts only: where none can come, it makes no warm interpreter.
  CHECK_FALSE(resolve({}).may_restart());
  CHECK(resolve({{"max_restarts", "1"}}).may_restart());
  CHECK(resolve({{"nnodes", "1:2"}}).may_restart());
  CHECK_FALSE(resolve({{"nnodes", "2"}}).may_restart());
  // c10d and etcd take hot spares: a lost node's round ends and a spare's workers start later.
  CHECK(resolve({{"nnodes", "2"}, {"rdzv_backend", "c10d"}, {"rdzv_endpoint", "h:29400"}}).may_restart());
  CHECK(resolve({{"nnodes", "2"}, {"rdzv_backend", "etcd"}, {"rdzv_endpoint", "h:2379"}}).may_restart());
  CHECK_FALSE(resolve({{"nnodes", "1"}, {"rdzv_backend", "c10d"}}).may_restart());
  CHECK(resolve({{"preload", "numpy,my_pkg.models"}}).preload == "numpy,my_pkg.models");
  for (const char* bad : {"", "numpy,", ",numpy", "a,,b", "numpy os", "numpy;rm"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(resolve({{"preload", bad}}),
                      doctest::Contains("expected Python module names separated by commas (numpy,my.pkg)"));
  }
}

TEST_CASE("--progress_pattern: repeatable, from the command line, PET_PROGRESS_PATTERN or the config") {
  CHECK(resolve({}).progress_patterns.empty());
  using V = std::vector<std::string>;
  CHECK(resolve({{"progress_pattern", "^step"}}).progress_patterns == V{"^step"});
  // The command line and a config array hold several, one a line (OptionKind::kList).
  CHECK(resolve({{"progress_pattern", "^step\n^epoch"}}).progress_patterns == V{"^step", "^epoch"});
  CHECK(resolve({}, {}, {{"progress_pattern", "^it (?<step>\\d+)"}}).progress_patterns == V{"^it (?<step>\\d+)"});
  CHECK(resolve({{"progress_pattern", "a"}}, {{"progress_pattern", "b"}}).progress_patterns == V{"a"});
  CHECK(resolve({{"progress_pattern", ""}}, {{"progress_pattern", "b"}}).progress_patterns.empty());
  CHECK_THROWS_WITH_AS(resolve({{"progress_pattern", "^step\n(x"}}),
                       doctest::Contains("--progress_pattern=(x: "), UsageError);
  const auto json = to_json(resolve({{"progress_pattern", "^step\n^epoch"}}));
  CHECK(json["progress_pattern"] == nlohmann::json::array({"^step", "^epoch"}));
}

TEST_CASE("the restart policy's options, from every source") {
  auto c = resolve({});
  CHECK_FALSE(c.restart_on_any);
  CHECK(c.restart_window == 0);
  CHECK(c.restart_backoff_max == 60);
  CHECK(c.crash_loop_limit == 5);
  CHECK(c.failure_rules.empty());
  CHECK(c.result_file.empty());
  c = resolve({{"restart_on", "any"}, {"restart_window", "86400"}}, {{"crash_loop_limit", "0"}},
              {{"restart_backoff_max", "0"}, {"result_file", "/tmp/r.json"}});
  CHECK(c.restart_on_any);
  CHECK(c.restart_window == 86400);
  CHECK(c.crash_loop_limit == 0);
  CHECK(c.restart_backoff_max == 0);
  CHECK(c.result_file == "/tmp/r.json");
  c = resolve({}, {{"failure_rules", R"([{"pattern": "Xid", "kind": "gpu_fault", "retryable": true}])"}});
  REQUIRE(c.failure_rules.size() == 1);
  CHECK(c.failure_rules[0].kind.name() == "gpu_fault");
  CHECK(to_json(c)["failure_rules"][0]["pattern"] == "Xid");
  CHECK(usage_error({{"restart_on", "always"}}) == "--restart_on=always: expected retryable or any");
  CHECK(usage_error({{"restart_window", "0"}}).rfind("--restart_window=0: expected a number of seconds greater than 0", 0) == 0);
  CHECK(usage_error({{"restart_backoff_max", "-1"}}).rfind("--restart_backoff_max=-1: expected a number of seconds (0 or more)", 0) == 0);
  CHECK(usage_error({{"crash_loop_limit", "x"}}).rfind("--crash_loop_limit=x: expected a number of failures", 0) == 0);
  CHECK(usage_error({}, {{"failure_rules", "[{}]"}}).rfind("PET_FAILURE_RULES: rule 0: \"pattern\" must be", 0) == 0);
}

TEST_CASE("--health_check and its timeout, from every source") {
  auto c = resolve({});
  CHECK(c.health_check.empty());
  CHECK(c.health_check_timeout == 60);
  CHECK(to_json(c)["health_check"].is_null());
  c = resolve({{"health_check", "nvidia-smi -L"}, {"health_check_timeout", "5.5"}});
  CHECK(c.health_check == "nvidia-smi -L");
  CHECK(c.health_check_timeout == 5.5);
  CHECK(to_json(c)["health_check"] == "nvidia-smi -L");
  CHECK(resolve({}, {{"health_check", "/opt/check"}}).health_check == "/opt/check");
  CHECK(resolve({}, {}, {{"health_check", "/opt/check"}, {"health_check_timeout", "9"}}).health_check_timeout == 9);
  CHECK(usage_error({{"health_check_timeout", "0"}})
            .rfind("--health_check_timeout=0: expected a number of seconds greater than 0", 0) == 0);
  CHECK(usage_error({{"health_check_timeout", "soon"}}).rfind("--health_check_timeout=soon: expected", 0) == 0);
  CHECK(usage_error({}, {{"health_check_timeout", "-1"}}).rfind("PET_HEALTH_CHECK_TIMEOUT=-1: expected", 0) == 0);
}

TEST_CASE("--snapshot, --snapshot_dir_size and --snapshot_keep, from every source") {
  struct Row {
    RawOptions cli, file, env;
    bool snapshot;
    unsigned long long size;
    bool keep;
  };
  const std::vector<Row> rows = {
      {{}, {}, {}, true, 0, false},  // on by default: it costs nothing until a worker writes
      {{{"snapshot", "off"}}, {}, {}, false, 0, false},
      {{{"snapshot", "0"}}, {}, {}, false, 0, false},
      {{}, {{"snapshot", "off"}}, {}, false, 0, false},
      {{}, {}, {{"snapshot", "off"}}, false, 0, false},
      {{{"snapshot", "on"}}, {}, {{"snapshot", "off"}}, true, 0, false},
      {{{"snapshot_dir_size", "4G"}}, {}, {}, true, 4ULL << 30, false},
      {{}, {{"snapshot_dir_size", "512M"}}, {}, true, 512ULL << 20, false},
      {{}, {}, {{"snapshot_dir_size", "1536m"}}, true, 1536ULL << 20, false},
      {{{"snapshot_dir_size", "1M"}}, {{"snapshot_dir_size", "2G"}}, {}, true, 1ULL << 20, false},
      {{{"snapshot_keep", "1"}}, {}, {}, true, 0, true},
      {{}, {{"snapshot_keep", "true"}}, {}, true, 0, true},
      {{}, {}, {{"snapshot_keep", "yes"}}, true, 0, true},
      {{{"snapshot_keep", "0"}}, {}, {{"snapshot_keep", "1"}}, true, 0, false},
  };
  for (const Row& row : rows) {
    const LaunchConfig c = resolve(row.cli, row.file, row.env);
    CHECK(c.snapshot == row.snapshot);
    CHECK(c.snapshot_dir_size == row.size);
    CHECK(c.snapshot_keep == row.keep);
  }
  CHECK(options_from_environment(
            {{"PET_SNAPSHOT", "off"}, {"PET_SNAPSHOT_DIR_SIZE", "4G"}, {"PET_SNAPSHOT_KEEP", "1"}}) ==
        RawOptions{{"snapshot", "off"}, {"snapshot_dir_size", "4G"}, {"snapshot_keep", "1"}});
  CHECK(usage_error({{"snapshot", "maybe"}}) == "--snapshot=maybe: expected on or off (or true/false, 1/0, yes/no)");
  const std::string accepted =
      "expected a size such as 512M or 4G (a whole number and K, M, G or T, powers of 1024), at least 1024K";
  CHECK(usage_error({{"snapshot_dir_size", "4GB"}}) == "--snapshot_dir_size=4GB: " + accepted);
  CHECK(usage_error({{"snapshot_dir_size", "4"}}) == "--snapshot_dir_size=4: " + accepted);
  CHECK(usage_error({{"snapshot_dir_size", "-1G"}}) == "--snapshot_dir_size=-1G: " + accepted);
  CHECK(usage_error({{"snapshot_dir_size", "lots"}}) == "--snapshot_dir_size=lots: " + accepted);
  CHECK(usage_error({}, {{"snapshot_dir_size", "1.5G"}}) == "PET_SNAPSHOT_DIR_SIZE=1.5G: " + accepted);
  CHECK(to_json(resolve({}))["snapshot"] == "on");
  CHECK(to_json(resolve({}))["snapshot_dir_size"].is_null());
  CHECK(to_json(resolve({{"snapshot_dir_size", "1536M"}}))["snapshot_dir_size"] == "1536M");
  CHECK(to_json(resolve({{"snapshot_dir_size", "4096M"}}))["snapshot_dir_size"] == "4G");
  CHECK(to_json(resolve({{"snapshot", "no"}, {"snapshot_keep", "y"}}))["snapshot"] == "off");
}

TEST_CASE("--snapshot_signal and --snapshot_grace (the dying gasp), from every source") {
  struct Row {
    RawOptions cli, file, env;
    int signal;
    double grace;
  };
  const std::vector<Row> rows = {
      {{}, {}, {}, 0, 5},  // off by default: a signal a script has no handler for kills it
      {{{"snapshot_signal", "SIGUSR1"}}, {}, {}, SIGUSR1, 5},
      {{{"snapshot_signal", "USR1"}}, {}, {}, SIGUSR1, 5},
      {{{"snapshot_signal", "usr2"}}, {}, {}, SIGUSR2, 5},
      {{{"snapshot_signal", std::to_string(SIGUSR1)}}, {}, {}, SIGUSR1, 5},
      {{{"snapshot_signal", "SIGTERM"}}, {}, {}, SIGTERM, 5},
      {{{"snapshot_signal", "off"}}, {}, {}, 0, 5},
      {{{"snapshot_signal", "OFF"}}, {}, {{"snapshot_signal", "SIGUSR1"}}, 0, 5},
      {{}, {{"snapshot_signal", "SIGUSR2"}, {"snapshot_grace", "0.5"}}, {}, SIGUSR2, 0.5},
      {{}, {}, {{"snapshot_signal", "SIGUSR1"}, {"snapshot_grace", "30"}}, SIGUSR1, 30},
      {{{"snapshot_grace", "2"}}, {}, {}, 0, 2},
  };
  for (const Row& row : rows) {
    const LaunchConfig c = resolve(row.cli, row.file, row.env);
    CHECK(c.snapshot_signal == row.signal);
    CHECK(c.snapshot_grace == row.grace);
  }
  CHECK(options_from_environment({{"PET_SNAPSHOT_SIGNAL", "SIGUSR1"}, {"PET_SNAPSHOT_GRACE", "3"}}) ==
        RawOptions{{"snapshot_signal", "SIGUSR1"}, {"snapshot_grace", "3"}});
  const std::string accepted =
      fmt::format("expected off or a signal among SIGHUP ({}), SIGINT ({}), SIGQUIT ({}), SIGTERM ({}), SIGUSR1 ({}), "
                  "SIGUSR2 ({}), by name, without SIG or by number",
                  SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2);
  CHECK(usage_error({{"snapshot_signal", "SIGKILL"}}) == "--snapshot_signal=SIGKILL: " + accepted);
  CHECK(usage_error({{"snapshot_signal", "9"}}) == "--snapshot_signal=9: " + accepted);
  CHECK(usage_error({{"snapshot_signal", "SIGSEGV"}}) == "--snapshot_signal=SIGSEGV: " + accepted);
  CHECK(usage_error({{"snapshot_signal", "yes"}}) == "--snapshot_signal=yes: " + accepted);
  CHECK(usage_error({}, {{"snapshot_signal", "SIGUSR3"}}) == "PET_SNAPSHOT_SIGNAL=SIGUSR3: " + accepted);
  CHECK(usage_error({{"snapshot_signal", "SIGUSR1"}, {"snapshot", "off"}}) ==
        "--snapshot_signal=SIGUSR1: the dying gasp saves into DDPRUN_SNAPSHOT_DIR, which --snapshot=off turns off; "
        "drop one of them");
  CHECK(usage_error({{"snapshot_grace", "0"}}).rfind("--snapshot_grace=0: expected a number of seconds greater than 0",
                                                     0) == 0);
  CHECK(usage_error({{"snapshot_grace", "soon"}}).rfind("--snapshot_grace=soon: expected", 0) == 0);
  CHECK(usage_error({}, {{"snapshot_grace", "-1"}}).rfind("PET_SNAPSHOT_GRACE=-1: expected", 0) == 0);
  CHECK(to_json(resolve({}))["snapshot_signal"] == "off");
  CHECK(to_json(resolve({}))["snapshot_grace"] == 5.0);
  CHECK(to_json(resolve({{"snapshot_signal", "usr1"}}))["snapshot_signal"] == "SIGUSR1");
}

TEST_CASE("--snapshot_replicas: all or K, from every source") {
  struct Row {
    RawOptions cli, file, env;
    int replicas;  // 0: all
  };
  const std::vector<Row> rows = {
      {{}, {}, {}, 0},  // all by default, whatever the job's size
      {{{"snapshot_replicas", "all"}}, {}, {}, 0},
      {{{"snapshot_replicas", "ALL"}}, {}, {}, 0},
      {{{"snapshot_replicas", "1"}}, {}, {}, 1},
      {{}, {{"snapshot_replicas", "2"}}, {}, 2},
      {{}, {}, {{"snapshot_replicas", "3"}}, 3},
      {{{"snapshot_replicas", "all"}}, {}, {{"snapshot_replicas", "1"}}, 0},
      {{{"snapshot_replicas", "64"}}, {}, {}, 64},  // more than the job's nodes: all, decided per round
  };
  for (const Row& row : rows) CHECK(resolve(row.cli, row.file, row.env).snapshot_replicas == row.replicas);
  CHECK(options_from_environment({{"PET_SNAPSHOT_REPLICAS", "1"}}) == RawOptions{{"snapshot_replicas", "1"}});
  const std::string accepted = "expected all, or a number of nodes that hold each file's copies, 1 or more";
  CHECK(usage_error({{"snapshot_replicas", "0"}}) == "--snapshot_replicas=0: " + accepted);
  CHECK(usage_error({{"snapshot_replicas", "-1"}}) == "--snapshot_replicas=-1: " + accepted);
  CHECK(usage_error({{"snapshot_replicas", "two"}}) == "--snapshot_replicas=two: " + accepted);
  CHECK(usage_error({{"snapshot_replicas", "1.5"}}) == "--snapshot_replicas=1.5: " + accepted);
  CHECK(usage_error({}, {{"snapshot_replicas", "every"}}) == "PET_SNAPSHOT_REPLICAS=every: " + accepted);
  CHECK(to_json(resolve({}))["snapshot_replicas"] == "all");
  CHECK(to_json(resolve({{"snapshot_replicas", "2"}}))["snapshot_replicas"] == 2);
}
