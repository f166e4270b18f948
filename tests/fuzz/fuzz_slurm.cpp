// Fuzzes the SLURM parsers: the compressed host list, SLURM_TASKS_PER_NODE and the environment
// ddprun and the worker library infer a job from. Input: NAME=VALUE, one a line; the whole
// input is also a host list and a tasks-per-node value.
#include <string>
#include <string_view>

#include "ddprun/hostlist.hpp"
#include "ddprun/slurm_env.hpp"
#include "fuzz_common.hpp"

using namespace ddprun::slurm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto hosts = expand_hostlist(text);
    if (hosts.empty() || hosts.size() > kMaxHosts) std::abort();
  } catch (const HostlistError& e) {
    ddprun::fuzz::check_message(e.what());
  }
  try {
    expand_tasks_per_node(text, "SLURM_TASKS_PER_NODE");
  } catch (const SlurmEnvError& e) {
    ddprun::fuzz::check_message(e.what());
  }
  Environment env;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    const auto eq = line.find('=');
    if (eq != std::string_view::npos) env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  try {
    const SlurmInference r = infer_from_slurm(env);
    (void)describe(r, "h:1");
  } catch (const SlurmEnvError& e) {
    ddprun::fuzz::check_message(e.what(), 1000);
  }
  try {
    (void)worker_identity_from_slurm(env);
  } catch (const SlurmEnvError& e) {
    ddprun::fuzz::check_message(e.what(), 1000);
  }
  return 0;
}
