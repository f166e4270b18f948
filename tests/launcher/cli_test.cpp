#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli.hpp"

using namespace ddprun;

namespace {

// Parses "ddprun ARGS...": the command line, or what() of the UsageError.
struct Parsed {
  std::optional<launcher::CommandLine> command_line;
  std::string error;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ddprun");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  Parsed p;
  try {
    p.command_line = launcher::parse_command_line(static_cast<int>(argv.size()), argv.data());
  } catch (const config::UsageError& e) {
    p.error = e.what();
  }
  return p;
}

}  // namespace

TEST_CASE("the command line: options as written, then PROGRAM and its arguments untouched") {
  struct Row {
    std::vector<std::string> args;
    config::RawOptions options;
    std::vector<std::string> program_and_args;
  };
  const std::vector<Row> rows = {
      {{"--nproc_per_node=2", "train.py"}, {{"nproc_per_node", "2"}}, {"train.py"}},
      {{"--nproc-per-node", "2", "train.py"}, {{"nproc_per_node", "2"}}, {"train.py"}},
      // The last one given wins, as with argparse.
      {{"--nnodes=1", "--nnodes=2", "t"}, {{"nnodes", "2"}}, {"t"}},
      // An empty value is the option's value (checked later), never the next argument.
      {{"--log_dir=", "--nproc_per_node=2", "t"}, {{"log_dir", ""}, {"nproc_per_node", "2"}}, {"t"}},
      // A prefix that names one option, in either spelling, as argparse allows.
      {{"--max_rest=3", "t"}, {{"max_restarts", "3"}}, {"t"}},
      {{"--nproc", "4", "t"}, {{"nproc_per_node", "4"}}, {"t"}},
      // Flags: given, or given a value that is checked as PET_* values are.
      {{"--standalone", "t"}, {{"standalone", "1"}}, {"t"}},
      {{"--standalone=0", "t"}, {{"standalone", "0"}}, {"t"}},
      {{"-m", "pkg.train"}, {{"module", "1"}}, {"pkg.train"}},
      // Short options with a value, separate or glued.
      {{"-r", "3", "-t1", "t"}, {{"redirects", "3"}, {"tee", "1"}}, {"t"}},
      // Repeatable: one value a line.
      {{"--progress_pattern", "a", "--progress-pattern=b", "t"}, {{"progress_pattern", "a\nb"}}, {"t"}},
      // A negative number is a value, not an option.
      {{"--max_restarts", "-1", "t"}, {{"max_restarts", "-1"}}, {"t"}},
      // PROGRAM ends the options: what follows is its own, options or not.
      {{"t", "--nproc_per_node=9", "-x"}, {}, {"t", "--nproc_per_node=9", "-x"}},
      {{"--", "-weird", "--help"}, {}, {"-weird", "--help"}},
      {{"--nnodes=2"}, {{"nnodes", "2"}}, {}},
  };
  for (const auto& row : rows) {
    CAPTURE(row.args);
    const Parsed p = parse(row.args);
    REQUIRE(p.error == "");
    REQUIRE(p.command_line);
    CHECK(p.command_line->options == row.options);
    CHECK(p.command_line->program_and_args == row.program_and_args);
  }
  const Parsed config = parse({"--config", "c.json", "--print-config", "t"});
  REQUIRE(config.command_line);
  CHECK(config.command_line->config_file == "c.json");
  CHECK(config.command_line->print_config);
}

TEST_CASE("the command line: one line naming the option and what is wrong") {
  struct Row {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Row> rows = {
      {{"--bogus", "t"}, "unknown option --bogus (see ddprun --help; put -- before a PROGRAM that starts with -)"},
      {{"--nproc_per_nodes=2", "t"}, "unknown option --nproc_per_nodes (see ddprun --help; put -- before a PROGRAM that starts with -)"},
      {{"-x", "t"}, "unknown option -x (see ddprun --help; put -- before a PROGRAM that starts with -)"},
      {{"-x=1", "t"}, "unknown option -x (see ddprun --help; put -- before a PROGRAM that starts with -)"},
      {{"--bogus=1", "t"}, "unknown option --bogus (see ddprun --help; put -- before a PROGRAM that starts with -)"},
      {{"--nn=2", "t"}, ""},  // --nnodes alone: a prefix
      {{"--no=1", "t"}, "--no is ambiguous: it could be --node_rank, --no_python (see ddprun --help)"},
      {{"--nproc_per_node"}, "--nproc_per_node: expected a value (see ddprun --help)"},
      {{"-r"}, "-r: expected a value (see ddprun --help)"},
      {{"--log_dir", "--nproc_per_node=2", "t"},
       "--log_dir: expected a value, not the option --nproc_per_node (write --log_dir=VALUE for a "
       "value that starts with -) (see ddprun --help)"},
      {{"--version=1"}, "--version: takes no value (see ddprun --help)"},
      {{"--print_config=yes", "t"}, "--print_config: takes no value (see ddprun --help)"},
      {{"--config=", "t"}, "--config=: expected the path of a JSON file of options"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.args);
    CHECK(parse(row.args).error == row.error);
  }
}

TEST_CASE("the command line: --help and --version print and return nothing to run") {
  CHECK_FALSE(parse({"--version"}).command_line);
  CHECK_FALSE(parse({"-h"}).command_line);
  CHECK_FALSE(parse({"--nproc_per_node=2", "--help", "t"}).command_line);
}
