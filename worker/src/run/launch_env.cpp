#include "ddprun/launch_env.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ddprun/slurm_env.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun {

LaunchEnvError::LaunchEnvError(std::string variable, const std::string& message)
    : std::runtime_error(message), variable_(std::move(variable)) {}

EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {

[[noreturn]] void malformed(const char* variable, const std::string& value, const std::string& expected) {
  throw LaunchEnvError(variable, std::string("environment variable ") + variable + "='" + value +
                                     "' is not " + expected);
}

long parse_int(const char* variable, const std::string& value, long min, long max,
               const std::string& expected) {
  if (value.empty()) malformed(variable, value, expected);
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || n < min || n > max) malformed(variable, value, expected);
  return n;
}

std::string require(const EnvLookup& env, const char* variable) {
  auto value = env(variable);
  if (!value) {
    throw LaunchEnvError(variable, std::string("environment variable ") + variable +
                                       " is not set; a launcher (ddprun, torchrun) sets RANK, "
                                       "WORLD_SIZE, MASTER_ADDR and MASTER_PORT together");
  }
  return *value;
}

}  // namespace

double parse_seconds(const char* variable, const std::string& text) {
  const std::string expected = "a number of seconds > 0 (e.g. 300 or 1.5)";
  if (text.empty()) malformed(variable, text, expected);
  errno = 0;
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(s) || s <= 0) malformed(variable, text, expected);
  return s;
}

LaunchEnv launch_env_from_process() {
  LaunchEnv out = parse_launch_env(process_env());
  if (out.launched) return out;
  const auto id = slurm::worker_identity_from_slurm(slurm::environment_from(environ));
  if (!id) return out;
  out.launched = true;
  out.rank = id->rank;
  out.world_size = id->world_size;
  out.local_rank = id->local_rank;
  out.local_world_size = id->local_world_size;
  out.master_addr = id->master_addr;
  out.master_port = static_cast<std::uint16_t>(id->master_port);
  return out;
}

LaunchEnv parse_launch_env(const EnvLookup& env) {
  LaunchEnv out;
  const bool any = env(env::kRank) || env(env::kWorldSize) || env(env::kMasterAddr) ||
                   env(env::kMasterPort);
  if (!any) return out;
  out.launched = true;

  out.world_size = static_cast<int>(
      parse_int(env::kWorldSize, require(env, env::kWorldSize), 1, 1L << 30, "an integer >= 1"));
  out.rank = static_cast<int>(parse_int(env::kRank, require(env, env::kRank), 0, out.world_size - 1,
                                        "an integer in [0, WORLD_SIZE=" +
                                            std::to_string(out.world_size) + ")"));
  out.master_addr = require(env, env::kMasterAddr);
  if (out.master_addr.empty()) malformed(env::kMasterAddr, "", "a host name or address");
  out.master_port = static_cast<std::uint16_t>(
      parse_int(env::kMasterPort, require(env, env::kMasterPort), 1, 65535, "a port in [1, 65535]"));

  out.local_world_size = out.world_size;
  if (auto v = env(env::kLocalWorldSize)) {
    out.local_world_size = static_cast<int>(parse_int(env::kLocalWorldSize, *v, 1,
                                                      out.world_size, "an integer in [1, WORLD_SIZE]"));
  }
  out.local_rank = out.rank;
  if (auto v = env(env::kLocalRank)) {
    out.local_rank = static_cast<int>(parse_int(env::kLocalRank, *v, 0, out.local_world_size - 1,
                                                "an integer in [0, LOCAL_WORLD_SIZE=" +
                                                    std::to_string(out.local_world_size) + ")"));
  } else if (out.local_rank >= out.local_world_size) {
    throw LaunchEnvError(env::kLocalRank, std::string("environment variable ") + env::kLocalRank +
                                              " is not set while LOCAL_WORLD_SIZE < WORLD_SIZE");
  }

  if (auto v = env(env::kRestartCount)) {
    out.restart_count = static_cast<int>(
        parse_int(env::kRestartCount, *v, 0, 1L << 30, "an integer >= 0"));
  }
  if (auto v = env(env::kUseAgentStore)) {
    if (*v == "True") {
      out.use_agent_store = true;
    } else if (*v != "False" && !v->empty()) {
      malformed(env::kUseAgentStore, *v, "True or False");
    }
  }
  return out;
}

void line_buffer_stdout() {
  // std::cout writes through stdout's buffer while synchronised with stdio (the default), so
  // this covers it too.
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
}

}  // namespace ddprun
