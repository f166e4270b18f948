// The command line, parsed by glibc's getopt_long from config::option_specs().
//
// getopt_long, not an option library: CLI11 built its parser for every start of ddprun, about
// 0.2 ms of CPU (it compares each new option's names with every earlier option's, ~50 options
// in two spellings), more than a third of what `ddprun --version` cost beyond a C++ hello world.
// getopt_long is in the libc ddprun maps anyway and reads the option table as it is.
#include "cli.hpp"

#include <getopt.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <string_view>

#include <fmt/format.h>

#include "cli_reference.hpp"
#include "ddprun/input_limits.hpp"

namespace ddprun::launcher {
namespace {

using config::OptionKind;
using config::OptionSpec;

// getopt_long's val for the options that are not in option_specs(); a spec's val is its index.
enum Extra : int { kHelp = 'h', kVersion = 1000, kConfig, kPrintConfig, kFirstSpec };

std::string dashed(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

// Every spelling of every option: --key and --key-with-dashes, with the same val, so that
// getopt_long takes a prefix of both spellings as one option. Flags take an optional "=VALUE"
// (--standalone=0, as PET_STANDALONE=0), never the next argument.
class LongOptions {
 public:
  LongOptions() {
    const auto& specs = config::option_specs();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const int has_arg = specs[i].kind == OptionKind::kFlag ? optional_argument : required_argument;
      const int val = kFirstSpec + static_cast<int>(i);
      add(specs[i].key, has_arg, val);
      if (dashed(specs[i].key) != specs[i].key) add(dashed(specs[i].key), has_arg, val);
      if (specs[i].short_flag != nullptr) {
        const char letter = specs[i].short_flag[1];
        shorts_ += has_arg == required_argument ? std::string{letter, ':'} : std::string{letter};
        short_vals_[static_cast<unsigned char>(letter)] = val;
      }
    }
    add("help", no_argument, kHelp);
    add("version", no_argument, kVersion);
    add("config", required_argument, kConfig);
    add("print_config", no_argument, kPrintConfig);
    add("print-config", no_argument, kPrintConfig);
    // getopt_long keeps pointers to the names: taken once names_ no longer grows.
    for (const auto& name : names_) options_.push_back({name.name.c_str(), name.has_arg, nullptr, name.val});
    options_.push_back({nullptr, 0, nullptr, 0});
  }

  const option* table() const { return options_.data(); }
  // "+": stop at PROGRAM, the first argument that is not an option (never reorder argv);
  // ":": a missing value returns ':' instead of printing getopt's own message.
  std::string short_options() const { return "+:h" + shorts_; }
  // The val of a short option's letter, as getopt_long returns the letter itself.
  int short_val(int letter) const { return letter > 0 && letter < 256 ? short_vals_[letter] : 0; }

  // The options whose names start with NAME (without "--"), each once, in table order.
  std::vector<std::string> matching(std::string_view name) const {
    std::vector<std::string> found;
    std::vector<int> vals;
    for (const auto& o : names_) {
      if (o.name.compare(0, name.size(), name) != 0) continue;
      if (std::find(vals.begin(), vals.end(), o.val) != vals.end()) continue;
      vals.push_back(o.val);
      found.push_back("--" + o.name);
    }
    return found;
  }

 private:
  struct Name {
    std::string name;
    int has_arg;
    int val;
  };
  void add(std::string name, int has_arg, int val) { names_.push_back({std::move(name), has_arg, val}); }

  std::vector<Name> names_;
  std::vector<option> options_;
  std::string shorts_;
  int short_vals_[256] = {};
};

// The command line's option names as the user wrote them: "--nproc" of "--nproc=2".
std::string written_name(const char* arg) {
  const std::string_view text(arg);
  return std::string(text.substr(0, text.find('=')));
}

[[noreturn]] void refuse(const std::string& what) {
  throw config::UsageError(fmt::format("{} (see ddprun --help)", what));
}

// getopt_long said '?': ARG is unknown, a prefix of several options, a short option that is
// not one, or an option that takes no value given one (--version=1; optopt is its val then).
[[noreturn]] void refuse_unknown(const LongOptions& options, const char* arg) {
  const std::string name = written_name(arg);
  if (::optopt != 0 && name.rfind("--", 0) == 0 && name != arg) refuse(fmt::format("{}: takes no value", shown(name)));
  if (name.rfind("--", 0) == 0 && name.size() > 2) {
    const auto candidates = options.matching(std::string_view(name).substr(2));
    if (candidates.size() > 1) {
      std::string list;
      for (const auto& c : candidates) list += (list.empty() ? "" : ", ") + c;
      refuse(fmt::format("{} is ambiguous: it could be {}", shown(name), list));
    }
  }
  throw config::UsageError(fmt::format(
      "unknown option {} (see ddprun --help; put -- before a PROGRAM that starts with -)", shown(name)));
}

// An option's value in the next argument must not look like another option: "--log_dir
// --nproc_per_node=2 prog" is a missing value, as torchrun (argparse) says, never a folder
// named "--nproc_per_node=2". A value that starts with - goes after "=".
bool looks_like_option(const char* value) {
  return value[0] == '-' && value[1] != '\0' && !(value[1] >= '0' && value[1] <= '9') && value[1] != '.';
}

// The option that getopt_long found without its value: "--log_dir", or "-r".
std::string missing_value_label(const char* arg) {
  if (arg[0] == '-' && arg[1] != '-') return fmt::format("-{}", static_cast<char>(::optopt));
  return written_name(arg);
}

}  // namespace

std::optional<CommandLine> parse_command_line(int argc, const char* const* argv) {
  static const LongOptions options;
  const auto& specs = config::option_specs();
  const std::string short_options = options.short_options();
  // getopt_long wants char* const*: it may reorder the pointers, never the strings ("+" keeps
  // the order anyway). A copy, so that the caller's argv is left as it was.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) args.push_back(const_cast<char*>(argv[i]));
  args.push_back(nullptr);

  // Views of the option table, only as the first argument (as `ddprun status`): the shell
  // completions, and the manual's options page (hidden: docs/reference/options.md is made by it).
  if (argc >= 2 && std::string_view(argv[1]) == "--completion") {
    if (argc != 3) throw config::UsageError("--completion: expected one shell, bash or zsh (ddprun --completion bash)");
    std::cout << completion_script(argv[2]);
    return std::nullopt;
  }
  if (argc == 2 && std::string_view(argv[1]) == "--help-markdown") {
    std::cout << options_markdown();
    return std::nullopt;
  }

  CommandLine cl;
  ::opterr = 0;
  ::optind = 0;  // glibc: start over (the fuzz tests parse many command lines in one process)
  for (;;) {
    const int at = ::optind == 0 ? 1 : ::optind;  // the argument getopt_long reads next
    int val = ::getopt_long(argc, args.data(), short_options.c_str(), options.table(), nullptr);
    if (val == -1) break;
    const char* arg = args[static_cast<std::size_t>(at)];
    if (val == '?') refuse_unknown(options, arg);
    if (val == ':') {
      refuse(fmt::format("{}: expected a value", shown(missing_value_label(arg))));
    }
    if (val < 256 && val != kHelp) val = options.short_val(val);
    // A value that was the next argument, not after "=" or glued to a short option.
    const bool separate = ::optarg != nullptr && ::optarg == args[static_cast<std::size_t>(::optind - 1)] &&
                          ::optind - 1 != at;
    if (separate && looks_like_option(::optarg)) {
      refuse(fmt::format("{}: expected a value, not the option {} (write {}=VALUE for a value that starts with -)",
                         shown(written_name(arg)), shown(written_name(::optarg)), shown(written_name(arg))));
    }
    const std::string value = ::optarg != nullptr ? ::optarg : "";
    switch (val) {
      case kHelp:
        std::cout << help_text();
        return std::nullopt;
      case kVersion:
        std::cout << "ddprun " DDPRUN_VERSION "\n";
        return std::nullopt;
      case kConfig:
        if (value.empty()) {
          throw config::UsageError(fmt::format("{}=: expected the path of a JSON file of options", written_name(arg)));
        }
        cl.config_file = value;
        continue;
      case kPrintConfig:
        cl.print_config = true;
        continue;
      default:
        break;
    }
    const OptionSpec& spec = specs[static_cast<std::size_t>(val - kFirstSpec)];
    const auto [it, first] = cl.options.try_emplace(spec.key);
    if (spec.kind == OptionKind::kFlag) {
      it->second = ::optarg == nullptr ? "1" : value;  // "=VALUE" is checked as PET_* values are
    } else if (spec.kind == OptionKind::kList && !first) {
      it->second += "\n" + value;  // one value a line (launch_config.hpp's OptionKind::kList)
    } else {
      it->second = value;  // the last one given wins
    }
  }
  cl.program_and_args.assign(argv + ::optind, argv + argc);
  return cl;
}

}  // namespace ddprun::launcher
