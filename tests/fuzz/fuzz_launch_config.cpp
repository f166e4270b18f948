// Fuzzes what a user gives ddprun: the command line, PET_* (and SLURM_*) variables and a
// --config file, through the same calls as launcher/main.cpp up to the rendezvous settings.
// Input: argv entries, one a line; a \x01 line; NAME=VALUE variables, one a line; a \x01 line;
// the --config file's bytes (none: no --config).
// Every bad input must be a UsageError (exit 64) whose message is one short line; any other
// exception (exit 70) or a crash is a bug.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous_config.hpp"
#include "ddprun/slurm_env.hpp"
#include "ddprun/slurm_options.hpp"
#include "ddprun/user_error.hpp"
#include "fuzz_common.hpp"
#include "rendezvous_setup.hpp"

using namespace ddprun;

namespace {

std::vector<std::string> lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    out.emplace_back(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  return out;
}

void run(std::string_view data) {
  const auto cut = [&](std::string_view& rest) {
    const auto at = rest.find("\n\x01\n");
    const std::string_view head = rest.substr(0, at);
    rest = at == std::string_view::npos ? std::string_view() : rest.substr(at + 3);
    return head;
  };
  std::string_view rest = data;
  std::vector<std::string> args = lines(cut(rest));
  const std::vector<std::string> env_lines = lines(cut(rest));
  const std::string_view json = rest;

  static const std::string config_path = "/tmp/ddprun-fuzz-config-" + std::to_string(::getpid()) + ".json";
  args.insert(args.begin(), "ddprun");
  if (!json.empty()) {
    std::FILE* f = std::fopen(config_path.c_str(), "w");
    if (f == nullptr) std::abort();
    std::fwrite(json.data(), 1, json.size(), f);
    std::fclose(f);
    args.insert(args.begin() + 1, {"--config", config_path});
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());

  std::map<std::string, std::string> vars;
  for (const auto& line : env_lines) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }

  const auto command_line = launcher::parse_command_line(static_cast<int>(argv.size()), argv.data());
  if (!command_line) return;  // --help or --version
  config::ResolveContext context;
  context.environ = vars;
  context.cpu_count = 4;
  context.gpu_count = 2;  // never run nvidia-smi
  config::OptionSources sources;
  sources.cli = command_line->options;
  if (!command_line->config_file.empty()) sources.file = config::options_from_json_file(command_line->config_file);
  sources.env = config::options_from_environment(vars);
  const slurm::SlurmInference slurm_job = slurm::infer_from_slurm(vars);
  sources.inferred = config::options_from_slurm(slurm_job, sources);
  const config::LaunchConfig cfg = config::resolve_config(sources, command_line->program_and_args, context);
  (void)config::to_json(cfg).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);  // as --print_config

  std::ostringstream notes;  // the lines main() prints for torchrun's store keys
  (void)launcher::rendezvous_config_for(cfg, vars, notes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    run(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const UserError& e) {
    // As main(), which catches every user error once. CLI11's own messages may quote an argument
    // whole; main() shortens those. Ours must be short.
    const std::string what = e.what();
    if (what.find("(see ddprun --help)") == std::string::npos) fuzz::check_message(what);
  }
  return 0;
}
