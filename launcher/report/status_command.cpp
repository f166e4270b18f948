#include "report/status_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddprun/exit_codes.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/launch_config.hpp"
#include "ddprun/user_error.hpp"
#include "report/step_rates.hpp"

namespace ddprun::launcher {

namespace {

using asio::ip::tcp;

// A server that neither answers nor refuses within this time is not there.
constexpr std::chrono::seconds kFetchTimeout{5};
// /status of thousands of ranks is well below this; more is not a ddprun.
constexpr std::size_t kMaxResponse = 16 * 1024 * 1024;
constexpr auto kWatchInterval = std::chrono::seconds(1);

constexpr const char* kAccepted =
    "expected [HOST:]PORT of a ddprun run with --status_port (e.g. 29600 or node3:29600)";

config::UsageError bad_target(std::string_view text, std::string_view why) {
  return config::UsageError(fmt::format("status {}: {}; {}", shown(std::string(text)), why, kAccepted));
}

UserError unavailable(const std::string& what) { return UserError(what, exit_code::kRendezvous); }

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// GET /status from `target`, the whole response.
std::string fetch(const StatusTarget& target, const std::string& where) {
  asio::io_context io;
  std::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(target.host, target.port, ec);
  if (ec) throw unavailable(fmt::format("status {}: cannot resolve {} ({})", where, shown(target.host), ec.message()));
  tcp::socket socket(io);
  const std::string request =
      fmt::format("GET /status HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", target.host);
  std::string response;
  std::optional<std::error_code> result;
  asio::async_connect(socket, endpoints, [&](std::error_code e, const tcp::endpoint&) {
    if (e) {
      result = e;
      return;
    }
    asio::async_write(socket, asio::buffer(request), [&](std::error_code e2, std::size_t) {
      if (e2) {
        result = e2;
        return;
      }
      asio::async_read(socket, asio::dynamic_buffer(response, kMaxResponse), [&](std::error_code e3, std::size_t) {
        result = e3 == asio::error::eof ? std::error_code() : e3;
      });
    });
  });
  io.run_for(kFetchTimeout);
  if (!result) {
    throw unavailable(fmt::format("status {}: no answer within {} s", where, kFetchTimeout.count()));
  }
  if (*result) {
    throw unavailable(fmt::format("status {}: {} (is a ddprun with --status_port={} running there?)", where,
                                  result->message(), target.port));
  }
  return response;
}

std::string text_or_dash(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string fixed_or_dash(const nlohmann::json& j, const char* key, const char* format) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "-";
  return fmt::format(fmt::runtime(format), it->get<double>());
}

std::optional<double> optional_number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// The ranks of every node's /status, as job_pace() compares them: the same rule as each server's.
JobPace pace_of(const std::vector<nlohmann::json>& nodes) {
  std::vector<PacedRank> ranks;
  for (const auto& node : nodes) {
    for (const auto& r : node["ranks"]) {
      PacedRank p;
      p.rank = r.value("rank", -1);
      p.running = r.value("running", false);
      if (r.contains("step") && r["step"].is_number_integer()) p.pace.step = r["step"].get<long long>();
      p.pace.steps_per_second = optional_number(r, "steps_per_second");
      p.pace.since_last_step = optional_number(r, "since_last_step");
      p.pace.step_time = optional_number(r, "step_time");
      ranks.push_back(p);
    }
  }
  return job_pace(ranks);
}

// "node3 (1 of 2)" for each node.
std::string node_list(const std::vector<nlohmann::json>& nodes) {
  std::string out;
  for (const auto& n : nodes) {
    out += fmt::format("{}{} ({} of {})", out.empty() ? "" : ", ", text_or_dash(n, "host"), text_or_dash(n, "node_rank"),
                       text_or_dash(n, "nodes"));
  }
  return out;
}

std::string job_line(const std::vector<nlohmann::json>& nodes) {
  // Round and restarts are the job's, the same on every node; phase and attempt are each node's.
  const nlohmann::json& s = nodes.front();
  std::string phases;
  for (const auto& n : nodes) {
    const std::string phase = text_or_dash(n, "phase");
    if (phases.find(phase) == std::string::npos) phases += (phases.empty() ? "" : "/") + phase;
  }
  const bool healthy = std::all_of(nodes.begin(), nodes.end(), [](const auto& n) { return n.value("healthy", false); });
  std::string line = fmt::format("job: {}, round {}, attempt {}, restarts {} ({} left), {} {}, {}", phases,
                                 text_or_dash(s, "round"), text_or_dash(s, "attempt"), text_or_dash(s, "restart_count"),
                                 text_or_dash(s, "restarts_left"), nodes.size() == 1 ? "node" : "nodes",
                                 node_list(nodes), healthy ? "healthy" : "NOT healthy");
  if (const auto timeout = optional_number(s, "hang_timeout")) line += fmt::format(", hang timeout {:.0f} s", *timeout);
  const JobPace pace = pace_of(nodes);
  std::string stragglers;
  for (const int r : pace.stragglers) stragglers += (stragglers.empty() ? "" : ", ") + std::to_string(r);
  line += fmt::format("; {} steps in all, slowest rank {}, stragglers: {}", pace.total_steps,
                      pace.slowest_rank ? std::to_string(*pace.slowest_rank) : "-",
                      stragglers.empty() ? "none" : stragglers);
  return line + "\n";
}

// "spares: h4 (10.0.0.4)" from the node that runs the coordinator, "quarantined: h2 (10.0.0.2):
// why" from any: each line only when there is something to say. Fields of other types are skipped.
std::string membership_lines(const std::vector<nlohmann::json>& nodes) {
  std::vector<std::string> spares;
  std::vector<std::string> quarantined;
  for (const auto& n : nodes) {
    const auto s = n.find("spares");
    if (s != n.end() && s->is_array() && spares.empty()) {
      for (const auto& name : *s) {
        if (name.is_string()) spares.push_back(name.get<std::string>());
      }
    }
    const auto q = n.find("quarantined");
    if (q != n.end() && q->is_array() && q->size() > quarantined.size()) {
      quarantined.clear();
      for (const auto& node : *q) {
        if (node.is_object()) quarantined.push_back(text_or_dash(node, "node") + ": " + text_or_dash(node, "why"));
      }
    }
  }
  std::string out;
  for (const auto& n : nodes) {
    const auto w = n.find("waiting_for_nodes");
    if (w == n.end() || !w->is_array() || w->empty()) continue;
    std::vector<std::string> ranks;
    for (const auto& r : *w) ranks.push_back(r.is_number_integer() ? std::to_string(r.get<int>()) : "-");
    out += fmt::format("done: {} ({} of {}): its workers finished; waiting for {} ({})\n", text_or_dash(n, "host"),
                       text_or_dash(n, "node_rank"), text_or_dash(n, "nodes"),
                       ranks.size() == 1 ? "1 node" : fmt::format("{} nodes", ranks.size()), fmt::join(ranks, ", "));
  }
  if (!spares.empty()) out += fmt::format("spares: {}\n", fmt::join(spares, ", "));
  for (const auto& q : quarantined) out += "quarantined: " + q + "\n";
  return out;
}

// "h1: goodput 96.1%: started in 4.2 s, ..." for each node whose /status has a ledger
// (each node's ledger sees its own ranks), under the table.
std::string goodput_lines(const std::vector<nlohmann::json>& nodes) {
  std::string out;
  for (const auto& n : nodes) {
    const auto g = n.find("goodput");
    if (g == n.end() || !g->is_object()) continue;
    out += fmt::format("{}: {}\n", text_or_dash(n, "host"), text_or_dash(*g, "summary"));
  }
  return out;
}

}  // namespace

StatusTarget parse_status_target(std::string_view text) {
  std::string_view rest = text;
  if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
    rest = rest.substr(0, rest.find('/'));
  }
  StatusTarget target;
  std::string_view port = rest;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos || rest.substr(close + 1, 1) != ":") {
      throw bad_target(text, "an IPv6 address in brackets needs a port after it");
    }
    target.host = std::string(rest.substr(1, close - 1));
    port = rest.substr(close + 2);
  } else if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (rest.substr(0, colon).find(':') != std::string_view::npos) {
      throw bad_target(text, "write an IPv6 address in brackets, [::1]:PORT");
    }
    target.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  if (target.host.empty()) throw bad_target(text, "no host before the ':'");
  if (!all_digits(port) || port.size() > 5 || std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535) {
    throw bad_target(text, "the port is not a number from 1 to 65535");
  }
  target.port = std::string(port);
  return target;
}

nlohmann::json status_from_response(std::string_view response, const std::string& where) {
  const auto fail = [&](std::string_view why) {
    return unavailable(fmt::format("status {}: {}: not a ddprun status server?", where, why));
  };
  const std::string_view line = response.substr(0, response.find("\r\n"));
  if (line.rfind("HTTP/1.", 0) != 0) throw fail("the answer is not HTTP");
  if (line.size() < 12 || line.substr(9, 3) != "200") throw fail(fmt::format("GET /status answered {}", shown(std::string(line))));
  const auto head_end = response.find("\r\n\r\n");
  if (head_end == std::string_view::npos) throw fail("the answer has no body");
  nlohmann::json status = nlohmann::json::parse(response.substr(head_end + 4), nullptr, false);
  if (!status.is_object() || !status.contains("ranks") || !status["ranks"].is_array()) {
    throw fail("the answer is not ddprun's /status JSON");
  }
  return status;
}

std::string format_status(const std::vector<nlohmann::json>& nodes) {
  const std::vector<std::string> header = {"rank", "node", "pid", "state", "steps", "steps/s", "since last step", "hung?"};
  std::vector<std::pair<int, std::vector<std::string>>> ranks;
  for (const auto& node : nodes) {
    for (const auto& r : node["ranks"]) {
      ranks.push_back({r.value("rank", -1),
                       {text_or_dash(r, "rank"), text_or_dash(node, "host"), text_or_dash(r, "pid"),
                        text_or_dash(r, "state"), text_or_dash(r, "step"), fixed_or_dash(r, "steps_per_second", "{:.2f}"),
                        fixed_or_dash(r, "since_last_step", "{:.1f} s"), r.value("hung", false) ? "HUNG" : "no"}});
    }
  }
  std::stable_sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<std::string>> rows = {header};
  for (auto& r : ranks) rows.push_back(std::move(r.second));
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  // Numbers right-aligned, words left-aligned; the last column is not padded.
  const std::vector<bool> right = {true, false, true, false, true, true, true, false};
  std::string out = job_line(nodes) + membership_lines(nodes);
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool last = i + 1 == row.size();
      line += right[i] ? fmt::format("{:>{}}", row[i], width[i]) : last ? row[i] : fmt::format("{:<{}}", row[i], width[i]);
      if (!last) line += "  ";
    }
    out += line + "\n";
  }
  return out + goodput_lines(nodes);
}

int status_command(const std::vector<std::string>& args, std::ostream& out) {
  bool watch = false;
  std::vector<std::string> targets;
  for (const auto& arg : args) {
    if (arg == "--watch" || arg == "-w") {
      watch = true;
    } else if (arg == "--help" || arg == "-h") {
      out << "Usage: ddprun status [--watch] [HOST:]PORT...\n"
             "Prints the live view of the ddprun serving --status_port at HOST:PORT (HOST: 127.0.0.1),\n"
             "one row a rank; several, one per node, make one table of the job's ranks.\n"
             "--watch draws it again every second. (A program named status: ./status.)\n";
      return exit_code::kSuccess;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw config::UsageError(fmt::format("status: unknown option {}; expected --watch, --help and [HOST:]PORT",
                                           shown(arg)));
    } else {
      targets.push_back(arg);
    }
  }
  if (targets.empty()) {
    throw config::UsageError(fmt::format(
        "status: no [HOST:]PORT given; {} (to run a program named status, write ./status or ddprun -- status)",
        kAccepted));
  }
  std::vector<StatusTarget> parsed;
  for (const auto& t : targets) parsed.push_back(parse_status_target(t));
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  while (true) {
    std::vector<nlohmann::json> nodes;
    for (const auto& target : parsed) {
      const std::string where = target.host.find(':') != std::string::npos
                                    ? fmt::format("[{}]:{}", target.host, target.port)
                                    : fmt::format("{}:{}", target.host, target.port);
      nodes.push_back(status_from_response(fetch(target, where), where));
    }
    std::string table;
    try {
      table = format_status(nodes);
    } catch (const nlohmann::json::exception&) {  // a field of another type than ddprun writes
      throw unavailable(fmt::format("status {}: the answer is not ddprun's /status JSON", fmt::join(targets, " ")));
    }
    // On a terminal each view replaces the last (cursor home, clear the screen).
    out << (watch && terminal ? "\x1b[H\x1b[2J" : "") << table << std::flush;
    if (!watch) return exit_code::kSuccess;
    std::this_thread::sleep_for(kWatchInterval);
    if (!terminal) out << "\n";
  }
}

}  // namespace ddprun::launcher
