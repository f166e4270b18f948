#include "cli.hpp"

#include <algorithm>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "ddprun/input_limits.hpp"

namespace ddprun::launcher {
namespace {

std::string dashed(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

constexpr const char* kDescription =
    "ddprun: start and supervise distributed PyTorch workers (a native torchrun).\n"
    "PROGRAM runs under python3 -u when it ends in .py (or with -m), else it is executed directly.";

// CLI11 would print "Usage: ddprun [OPTIONS]": PROGRAM is not one of its positionals.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: ddprun [options] PROGRAM [ARGS...]\n"
           "       ddprun status [--watch] [HOST:]PORT...   (the live view of a run with --status_port)\n";
  }
};

constexpr const char* kFooter =
    "Every option can also be given as PET_<OPTION> in the environment (PET_NPROC_PER_NODE=4)\n"
    "or as a key of the --config JSON file; the command line wins, then the file, then PET_*.\n"
    "Exit codes: the failed worker's own code (128+N for signal N), 64 usage error,\n"
    "69 rendezvous error, 70 internal error, 126/127 program not executable/not found.";

// CLI11 reads "--log_dir=" (an empty value) as "--log_dir" and takes the next argument as its
// value: "--log_dir= --nproc_per_node=2 prog" ran one worker and made a folder named
// "--nproc_per_node=2". So empty values are taken out of `args` before CLI11 sees them and
// returned as key -> "", for the options before PROGRAM only.
std::map<std::string, std::string> take_empty_values(std::vector<std::string>& args) {
  std::map<std::string, const config::OptionSpec*> by_name;
  for (const auto& spec : config::option_specs()) {
    by_name["--" + std::string(spec.key)] = &spec;
    by_name["--" + dashed(spec.key)] = &spec;
    if (spec.short_flag != nullptr) by_name[spec.short_flag] = &spec;
  }
  std::map<std::string, std::string> empty;
  for (std::size_t i = 0; i < args.size();) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.empty() || arg[0] != '-') break;  // PROGRAM starts here
    const auto eq = arg.find('=');
    const auto it = by_name.find(arg.substr(0, eq));
    if (it != by_name.end() && it->second->kind != config::OptionKind::kFlag) {
      if (eq == arg.size() - 1) {
        empty[it->second->key] = "";
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      if (eq == std::string::npos) ++i;  // "--opt VALUE": skip the value
    } else if (arg == "--config=") {
      throw config::UsageError("--config=: expected the path of a JSON file of options");
    } else if (arg == "--config") {
      ++i;
    }
    ++i;
  }
  return empty;
}

}  // namespace

std::optional<CommandLine> parse_command_line(int argc, const char* const* argv) {
  CLI::App app{kDescription, "ddprun"};
  app.footer(kFooter);
  app.formatter(std::make_shared<Formatter>());
  app.prefix_command();  // PROGRAM and everything after it are left untouched
  app.set_version_flag("--version", "ddprun " DDPRUN_VERSION);

  std::map<std::string, std::string> text_values;
  std::map<std::string, bool> flag_values;
  std::map<std::string, std::vector<std::string>> list_values;
  std::map<std::string, CLI::Option*> given;
  for (const auto& spec : config::option_specs()) {
    std::string names = "--" + std::string(spec.key);
    if (dashed(spec.key) != spec.key) names += ",--" + dashed(spec.key);
    if (spec.short_flag != nullptr) names += std::string(",") + spec.short_flag;
    CLI::Option* option = nullptr;
    if (spec.kind == config::OptionKind::kFlag) {
      option = app.add_flag(names, flag_values[spec.key], spec.help);
    } else if (spec.kind == config::OptionKind::kList) {
      option = app.add_option(names, list_values[spec.key], spec.help);
      option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->expected(1)->allow_extra_args(false);
    } else {
      option = app.add_option(names, text_values[spec.key], spec.help);
      option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      if (spec.default_text != nullptr) option->default_str(spec.default_text);
    }
    option->group(spec.group);
    given[spec.key] = option;
  }
  CommandLine cl;
  app.add_option("--config", cl.config_file, "JSON file of options (keys as above)")
      ->group("Configuration");
  app.add_flag("--print_config,--print-config", cl.print_config,
               "print the effective configuration as JSON and exit")
      ->group("Configuration");

  std::vector<std::string> args(argv + 1, argv + argc);
  const auto empty_values = take_empty_values(args);
  std::reverse(args.begin(), args.end());  // CLI11 consumes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return std::nullopt;
  } catch (const CLI::Success&) {  // --help
    std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw config::UsageError(fmt::format("{} (see ddprun --help)", e.what()));
  }
  cl.program_and_args = app.remaining();
  if (!cl.program_and_args.empty() && cl.program_and_args.front() == "--") {
    cl.program_and_args.erase(cl.program_and_args.begin());
  } else if (!cl.program_and_args.empty() && cl.program_and_args.front().size() > 1 &&
             cl.program_and_args.front()[0] == '-') {
    const std::string& unknown = cl.program_and_args.front();
    throw config::UsageError(fmt::format(
        "unknown option {} (see ddprun --help; put -- before a PROGRAM that starts with -)",
        shown(unknown.substr(0, unknown.find('=')))));
  }
  // An option given empty and again with a value: the value (CLI11 keeps the last one too).
  for (const auto& [key, value] : empty_values) cl.options[key] = value;
  for (const auto& spec : config::option_specs()) {
    if (given[spec.key]->count() == 0) continue;
    if (spec.kind == config::OptionKind::kList) {
      std::string lines;  // one value a line (launch_config.hpp's OptionKind::kList)
      for (const auto& value : list_values[spec.key]) lines += (lines.empty() ? "" : "\n") + value;
      cl.options[spec.key] = lines;
      continue;
    }
    cl.options[spec.key] =
        spec.kind == config::OptionKind::kFlag ? (flag_values[spec.key] ? "1" : "0") : text_values[spec.key];
  }
  return cl;
}

}  // namespace ddprun::launcher
