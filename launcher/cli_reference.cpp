// The option table as --help, as the manual's options page and as shell completions.
#include "cli_reference.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/launch_config.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::launcher {
namespace {

using config::OptionKind;

constexpr const char* kDescription =
    "ddprun: start and supervise distributed PyTorch workers (a native torchrun).\n"
    "PROGRAM runs under python3 -u when it ends in .py (or with -m), else it is executed directly.\n";

constexpr const char* kUsage =
    "Usage: ddprun [options] PROGRAM [ARGS...]\n"
    "       ddprun status [--watch] [HOST:]PORT...   (the live view of a run with --status_port)\n"
    "       ddprun report EVENT_LOG [-o FILE.html]   (a page of the job drawn from its --event_log)\n"
    "       ddprun --completion bash|zsh              (a shell completion script)\n";

constexpr const char* kFooter =
    "An option may be shortened to a prefix that names only it (--max_rest=3), as torchrun allows.\n"
    "Every option can also be given as PET_<OPTION> in the environment (PET_NPROC_PER_NODE=4)\n"
    "or as a key of the --config JSON file; the command line wins, then the file, then PET_*.\n"
    "Exit codes: the failed worker's own code (128+N for signal N), 64 usage error,\n"
    "69 rendezvous error, 70 internal error, 71 node quarantined, 124 hang,\n"
    "126/127 program not executable/not found.\n";

std::string dashed(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return text;
}

// TEXT's words in lines of at most WIDTH columns, each line after INDENT spaces.
std::string wrapped(std::string_view text, std::size_t indent, std::size_t width) {
  std::string out;
  std::size_t column = 0;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view{} : text.substr(space + 1);
    if (word.empty()) continue;
    if (column > 0 && column + 1 + word.size() > width) {
      out += '\n';
      column = 0;
    }
    if (column == 0) {
      out.append(indent, ' ');
      column = indent;
    } else {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out + '\n';
}

// TEXT with CommonMark's markup characters escaped: the table's help is plain text.
std::string markdown_text(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::string_view("\\`*_[]<>|~#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// TEXT inside single quotes of a shell script.
std::string single_quoted(std::string_view text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A short description for zsh's _arguments: the help up to its first clause, without the
// characters _arguments reads as its own syntax.
std::string zsh_description(std::string_view help) {
  std::string out;
  for (const char c : help) {
    if (c == ':' || c == ';' || c == '(' || (c == ',' && out.size() > 30)) break;
    if (c == '[' || c == ']' || c == '\\' || c == '\'' || c == '`' || c == '$') continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::vector<std::string> all_names(const std::vector<OptionGroup>& groups, bool with_value) {
  std::vector<std::string> names;
  for (const auto& group : groups) {
    for (const auto& entry : group.entries) {
      if (!entry.value.empty() != with_value) continue;
      names.insert(names.end(), entry.names.begin(), entry.names.end());
    }
  }
  return names;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) out += (out.empty() ? "" : " ") + word;
  return out;
}

std::string bash_completion() {
  const auto groups = option_groups();
  std::string script =
      "# bash completion for ddprun, generated from its option table by `ddprun --completion bash`.\n"
      "# Load it with: source <(ddprun --completion bash)\n"
      "_ddprun() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]}\n"
      "  local with_value=' " + joined(all_names(groups, true)) + " '\n"
      "  local flags=' " + joined(all_names(groups, false)) + " '\n"
      "  local i=1 word name\n"
      "  COMPREPLY=()\n"
      "  # ddprun's options end at PROGRAM (or after --): its arguments are the program's.\n"
      "  while (( i < COMP_CWORD )); do\n"
      "    word=${COMP_WORDS[i]}\n"
      "    if [[ $word == -- ]]; then\n"
      "      (( i + 1 < COMP_CWORD )) && return 0\n"
      "      COMPREPLY=($(compgen -c -- \"$cur\"))\n"
      "      return 0\n"
      "    elif [[ $word == -?* ]]; then\n"
      "      name=${word%%=*}\n"
      "      if [[ ${COMP_WORDS[i+1]} == = ]]; then\n"
      "        (( i += 2 ))\n"
      "      elif [[ $word != *=* && $with_value == *\" $name\"* && $flags != *\" $name\"* ]]; then\n"
      "        (( i += 1 ))\n"
      "      fi\n"
      "    else\n"
      "      return 0\n"
      "    fi\n"
      "    (( i += 1 ))\n"
      "  done\n"
      "  local prev=${COMP_WORDS[COMP_CWORD-1]}\n"
      "  # An option's value: left to the shell's default (file names).\n"
      "  if [[ $cur == = || $prev == = ]] || { [[ $cur != -* && $with_value == *\" $prev \"* ]]; }; then\n"
      "    [[ $cur == = ]] && cur=''\n"
      "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      "    return 0\n"
      "  fi\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$with_value $flags\" -- \"$cur\"))\n"
      "  else\n"
      "    COMPREPLY=($(compgen -c -- \"$cur\") $(compgen -f -- \"$cur\"))\n"
      "  fi\n"
      "}\n"
      "complete -o default -F _ddprun ddprun\n";
  return script;
}

std::string zsh_completion() {
  std::string specs;
  for (const auto& group : option_groups()) {
    for (const auto& entry : group.entries) {
      const std::string description = zsh_description(entry.help);
      std::string exclusions;
      if (entry.names.size() > 1) exclusions = "(" + joined(entry.names) + ")";
      if (entry.repeatable) exclusions.clear();
      for (const auto& name : entry.names) {
        std::string spec = exclusions + (entry.repeatable ? "*" : "") + name;
        if (!entry.value.empty()) spec += name.size() == 2 ? "+" : "=";
        spec += "[" + description + "]";
        if (!entry.value.empty()) spec += ":" + upper(entry.value == "VALUE" ? "value" : entry.value) + ":_files";
        specs += "    " + single_quoted(spec) + " \\\n";
      }
    }
  }
  return "#compdef ddprun\n"
         "# zsh completion for ddprun, generated from its option table by `ddprun --completion zsh`.\n"
         "# Save it as _ddprun in a folder of $fpath, or load it with: source <(ddprun --completion zsh)\n"
         "_ddprun() {\n"
         "  # -A '-*': no option is completed after PROGRAM, whose arguments are its own.\n"
         "  _arguments -s -S -A '-*' \\\n" +
         specs +
         "    '1:program:_command_names -e' \\\n"
         "    '*::program arguments:_normal'\n"
         "}\n"
         "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n"
         "  _ddprun \"$@\"\n"
         "else\n"
         "  compdef _ddprun ddprun\n"
         "fi\n";
}

}  // namespace

std::vector<OptionGroup> option_groups() {
  std::vector<OptionGroup> groups = {
      {"Options",
       {{{"-h", "--help"}, "", false, "print this help and exit", "", "", false},
        {{"--version"}, "", false, "print ddprun's version and exit", "", "", false}}}};
  const auto group_named = [&](const std::string& name) -> std::vector<OptionEntry>& {
    for (auto& group : groups) {
      if (group.name == name) return group.entries;
    }
    return groups.push_back({name, {}}), groups.back().entries;
  };
  for (const auto& spec : config::option_specs()) {
    OptionEntry entry;
    if (spec.short_flag != nullptr) entry.names.push_back(spec.short_flag);
    entry.names.push_back("--" + std::string(spec.key));
    if (dashed(spec.key) != spec.key) entry.names.push_back("--" + dashed(spec.key));
    entry.value = spec.kind == OptionKind::kFlag ? "" : spec.kind == OptionKind::kJson ? "JSON" : "VALUE";
    entry.repeatable = spec.kind == OptionKind::kList;
    entry.optional_value = spec.kind == OptionKind::kFlag;
    entry.help = spec.help;
    entry.default_text = spec.default_text != nullptr ? spec.default_text : "";
    entry.key = spec.key;
    group_named(spec.group).push_back(std::move(entry));
  }
  auto& configuration = group_named("Configuration");
  configuration.push_back({{"--config"}, "FILE", false, "JSON file of options (keys as above)", "", "", false});
  configuration.push_back({{"--print_config", "--print-config"}, "", false,
                           "print the effective configuration as JSON and exit", "", "", false});
  return groups;
}

std::string help_text() {
  std::string text = std::string(kDescription) + kUsage;
  for (const auto& group : option_groups()) {
    text += "\n" + group.name + ":\n";
    for (const auto& entry : group.entries) {
      std::string names;
      for (const auto& name : entry.names) names += (names.empty() ? "" : ", ") + name;
      if (!entry.value.empty()) names += " " + entry.value + (entry.repeatable ? " (repeatable)" : "");
      std::string help = entry.help;
      if (!entry.default_text.empty()) help += fmt::format(" (default: {})", entry.default_text);
      text += "  " + names + "\n" + wrapped(help, 6, 100);
    }
  }
  return text + "\n" + kFooter;
}

std::string options_markdown() {
  std::string page =
      "% Generated from ddprun's option table (config/src/launch/options.cpp) by\n"
      "% `ddprun --help-markdown > docs/reference/options.md`; do not edit: the docs_options test\n"
      "% fails when this page differs from what the table makes. Included by ddprun.md.\n\n"
      "(options)=\n"
      "## Options\n\n"
      "```{program} ddprun\n```\n\n"
      "`ddprun [options] PROGRAM [ARGS...]`. Every option is accepted in both spellings "
      "(`--nproc_per_node`, `--nproc-per-node`) and may be shortened to a prefix that names only it "
      "(`--max_rest=3`). Each option of the table can also be given as `PET_<OPTION>` in the "
      "environment (`PET_NPROC_PER_NODE=4`) or as a key of the `--config` JSON file; the command "
      "line wins over the file, the file over `PET_*`. A flag takes no value, or `=VALUE` with one "
      "of `1`, `true`, `t`, `yes`, `y`, `on` or `0`, `false`, `f`, `no`, `n`, `off` (case aside), "
      "never the next argument. Anything after PROGRAM, or after `--`, is the program's. "
      "`ddprun --help` prints the same list.\n";
  for (const auto& group : option_groups()) {
    page += "\n### " + (group.name == "Options" ? std::string("General") : group.name) + "\n";
    for (const auto& entry : group.entries) {
      std::string signature;
      for (const auto& name : entry.names) {
        signature += (signature.empty() ? "" : ", ") + name + (entry.value.empty() ? "" : " " + entry.value);
      }
      std::string help = markdown_text(entry.help);
      if (!help.empty() && help[0] >= 'a' && help[0] <= 'z') help[0] = static_cast<char>(help[0] - 'a' + 'A');
      page += "\n```{option} " + signature + "\n" + help + ".\n";
      std::vector<std::string> notes;
      if (entry.repeatable) notes.push_back("Repeatable: each one adds a value.");
      if (!entry.default_text.empty()) notes.push_back("Default: `" + entry.default_text + "`.");
      if (!entry.key.empty()) {
        notes.push_back(fmt::format("Also `PET_{}`, and `\"{}\"` in a `--config` file.", upper(entry.key), entry.key));
      }
      if (!notes.empty()) page += "\n" + joined(notes) + "\n";
      page += "```\n";
    }
  }
  return page;
}

std::string completion_script(std::string_view shell) {
  if (shell == "bash") return bash_completion();
  if (shell == "zsh") return zsh_completion();
  throw config::UsageError(fmt::format("--completion: unknown shell {}: expected bash or zsh", shown(std::string(shell))));
}

}  // namespace ddprun::launcher
