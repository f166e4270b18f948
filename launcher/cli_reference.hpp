// What the option table (config::option_specs()) becomes for people and shells: `--help`, the
// manual's options page (`ddprun --help-markdown`, docs/reference/options.md and the man page)
// and the shell completions (`ddprun --completion bash|zsh`). One table, four views, so that an
// option added to the table is in all of them; tests/docs/ fails when the committed page differs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

// An option as --help and the manual show it: the table's rows, then ddprun's own extras
// (--help, --version, --config, --print_config), grouped as --help groups them.
struct OptionEntry {
  std::vector<std::string> names;  // "-m", "--module"; "--nproc_per_node", "--nproc-per-node"
  std::string value;               // "VALUE", "JSON", "FILE", or "" for a flag
  bool repeatable = false;
  std::string help;
  std::string default_text;        // "" when unset
  std::string key;                 // the table's key ("" for the extras): PET_<KEY>, the --config key
  bool optional_value = false;     // a flag: "=VALUE" allowed, never the next argument
};
struct OptionGroup {
  std::string name;
  std::vector<OptionEntry> entries;
};

// Every option, in --help order.
std::vector<OptionGroup> option_groups();

// `ddprun --help`.
std::string help_text();

// The manual's options page, MyST Markdown for Sphinx (`ddprun --help-markdown`).
std::string options_markdown();

// `ddprun --completion SHELL`: a completion script for bash or zsh. Throws config::UsageError
// naming the value and the shells accepted for any other SHELL.
std::string completion_script(std::string_view shell);

}  // namespace ddprun::launcher
