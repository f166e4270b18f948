#include "option_values.hpp"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/parse.hpp"

namespace ddprun::config {

std::pair<int, int> parse_nnodes(const std::string& text) {
  constexpr int kMaxNodes = 1 << 20;
  const auto node_count = [&](const std::string& part) {
    // Digits only: "+2" and " 2" are no node counts (MIN:MAX leaves no room for a sign).
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char ch) { return std::isdigit(ch); });
    if (!digits) throw bad_value("--nnodes", text, "a number of nodes N or MIN:MAX");
    const long long n = part.size() <= 8 ? *to_integer(part) : 0;
    if (n < 1 || n > kMaxNodes) {
      throw bad_value("--nnodes", text, fmt::format("1 or more nodes (at most {}), as N or MIN:MAX", kMaxNodes));
    }
    return static_cast<int>(n);
  };
  const auto colon = text.find(':');
  const int min_nodes = node_count(text.substr(0, colon));
  const int max_nodes = colon == std::string::npos ? min_nodes : node_count(text.substr(colon + 1));
  if (min_nodes > max_nodes) {
    throw UsageError(fmt::format("--nnodes={}: MIN is larger than MAX; expected MIN:MAX with MIN <= MAX", text));
  }
  return {min_nodes, max_nodes};
}

std::string nnodes_text(int min_nodes, int max_nodes) {
  return min_nodes == max_nodes ? std::to_string(min_nodes) : fmt::format("{}:{}", min_nodes, max_nodes);
}

HangTimeout parse_hang_timeout(const std::string& text) {
  HangTimeout t;
  if (text == "off") return t;
  std::string number = text;
  t.mode = HangTimeout::Mode::kFixed;
  if (text.rfind("auto", 0) == 0) {
    t.mode = HangTimeout::Mode::kAuto;
    if (text == "auto") return t;
    number = text[4] == ':' ? text.substr(5) : std::string();
  }
  const auto seconds = to_seconds(number);
  if (!seconds || *seconds == 0) {
    throw bad_value("--hang_timeout", text,
                    fmt::format("a number of seconds greater than 0 and {}, auto, auto:MIN_SECONDS or off",
                                kMaxTimeoutText));
  }
  t.seconds = *seconds;
  return t;
}

nlohmann::json hang_timeout_json(const HangTimeout& timeout) {
  switch (timeout.mode) {
    case HangTimeout::Mode::kOff: return "off";
    case HangTimeout::Mode::kAuto: return timeout.seconds > 0 ? fmt::format("auto:{}", timeout.seconds) : "auto";
    case HangTimeout::Mode::kFixed: break;
  }
  return timeout.seconds;
}

// Parsed by hand: std::regex recurses once per character and overflowed the stack on a long list.
StreamSelection parse_streams(const std::string& name, const std::string& text) {
  const auto fail = [&] {
    return bad_value(name, text, "0 (none), 1 (stdout), 2 (stderr), 3 (both), or per local rank like 0:1,1:3");
  };
  const auto is_mask = [](char c) { return c >= '0' && c <= '3'; };
  StreamSelection selection;
  if (text.size() == 1 && is_mask(text[0])) {
    selection.all = text[0] - '0';
    return selection;
  }
  std::size_t i = 0;
  do {
    if (i > 0) ++i;  // the ','
    int rank = 0;
    const std::size_t begin = i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (i - begin >= 7) throw fail();  // local ranks are below 1 << 20
      rank = rank * 10 + (text[i] - '0');
    }
    if (i == begin || i + 1 >= text.size() || text[i] != ':' || !is_mask(text[i + 1])) throw fail();
    selection.per_rank[rank] = text[i + 1] - '0';
    i += 2;
  } while (i < text.size() && text[i] == ',');
  if (i != text.size()) throw fail();
  return selection;
}

std::string streams_text(const StreamSelection& selection) {
  if (selection.per_rank.empty()) return std::to_string(selection.all);
  std::string out;
  for (const auto& [rank, mask] : selection.per_rank) out += fmt::format("{}{}:{}", out.empty() ? "" : ",", rank, mask);
  return out;
}

std::set<int> parse_rank_list(const std::string& name, const std::string& text, int nproc) {
  std::set<int> ranks;
  std::stringstream items(text);
  std::string item;
  const std::string accepted = fmt::format("local ranks 0..{} separated by commas", nproc - 1);
  while (std::getline(items, item, ',')) ranks.insert(parse_integer(name, item, 0, nproc - 1, accepted));
  if (ranks.empty()) throw bad_value(name, text, "local ranks separated by commas, e.g. 0,1");
  return ranks;
}

std::string rank_list_text(const std::set<int>& ranks) {
  std::string out;
  for (int rank : ranks) out += fmt::format("{}{}", out.empty() ? "" : ",", rank);
  return out;
}

std::vector<std::string> parse_filters(const std::string& text) {
  std::vector<std::string> items;
  if (text.empty()) return items;  // torchrun's default, an empty list: no filter at all
  std::string item;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else {
      items.push_back(std::move(item));
      item.clear();
    }
  }
  items.push_back(std::move(item));
  return items;
}

std::string filters_text(const std::vector<std::string>& filters) {
  std::string out;
  for (const auto& filter : filters) {
    if (&filter != &filters.front()) out += ',';
    for (char ch : filter) out += ch == ',' ? std::string(",,") : std::string(1, ch);
  }
  return out;
}

namespace {

// The signals ddprun can take over from torchrun's --signals_to_handle: those its signal channel
// receives (launcher/process/signal_channel.hpp).
const std::map<std::string, int>& handled_signal_names() {
  static const std::map<std::string, int> names = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},
                                                   {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
  return names;
}

}  // namespace

// Names separated by commas, spaces around them ignored, as torchrun strips them.
std::set<int> parse_signals(const std::string& text) {
  std::set<int> signals;
  for (const std::string& name : split_device_list(text)) {
    const auto it = handled_signal_names().find(name);
    if (it == handled_signal_names().end()) {
      throw UsageError(fmt::format(
          "--signals_to_handle={}: {} is not a signal ddprun handles; expected names among SIGTERM, SIGINT, "
          "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 separated by commas",
          shown(text), name.empty() ? "an empty name" : shown(name)));
    }
    signals.insert(it->second);
  }
  return signals;
}

int parse_snapshot_signal(const std::string& text) {
  std::string name = text;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::toupper(ch); });
  if (name.empty() || name == "OFF") return 0;
  if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
  for (const auto& [known, number] : handled_signal_names()) {
    if (name == known || text == std::to_string(number)) return number;
  }
  std::string accepted;
  for (const auto& [known, number] : handled_signal_names()) {
    accepted += fmt::format("{}{} ({})", accepted.empty() ? "" : ", ", known, number);
  }
  throw UsageError(fmt::format("--snapshot_signal={}: expected off or a signal among {}, by name, without SIG or by "
                               "number",
                               shown(text), accepted));
}

void check_python_plugin(const std::string& key, const std::string& value, const char* what, const char* accepted,
                         const char* instead) {
  if (value.empty() || value == accepted) return;
  throw UsageError(fmt::format("--{}={}: names a Python {}; only '{}' is accepted ({})", key, shown(value), what,
                               accepted, instead));
}

}  // namespace ddprun::config
