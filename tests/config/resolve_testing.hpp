// What the tests of resolve_config() share (launch_config_test.cpp, launch_config_steps_test.cpp).
#pragma once

#include <string>
#include <vector>

#include "ddprun/launch_config.hpp"

namespace ddprun::config {

// resolve_config() of these sources on a machine of 6 CPUs and no GPU.
inline LaunchConfig resolve(const RawOptions& cli, const RawOptions& file = {}, const RawOptions& env = {},
                            std::vector<std::string> program = {"train"}) {
  ResolveContext context;
  context.cpu_count = 6;
  context.gpu_count = 0;
  return resolve_config({{}, env, file, cli}, program, context);
}

// The UsageError resolve() throws, or "" when it accepts.
inline std::string usage_error(const RawOptions& cli, const RawOptions& env = {}) {
  try {
    resolve(cli, {}, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace ddprun::config
