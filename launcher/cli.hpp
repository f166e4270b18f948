// The command line: torchrun's options in both spellings (--nproc_per_node, --nproc-per-node),
// ddprun's own, then PROGRAM [ARGS...] passed through untouched.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddprun/launch_config.hpp"

namespace ddprun::launcher {

struct CommandLine {
  config::RawOptions options;               // as written on the command line
  std::string config_file;                  // --config
  bool print_config = false;                // --print_config
  std::vector<std::string> program_and_args;
};

// Parses argv. Returns nullopt after printing --help or --version, or, as the first argument,
// --completion SHELL or --help-markdown (exit 0). Throws
// config::UsageError for an unknown option or a malformed one.
std::optional<CommandLine> parse_command_line(int argc, const char* const* argv);

}  // namespace ddprun::launcher
