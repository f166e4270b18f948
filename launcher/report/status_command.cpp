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

#include "ddprun/exit_codes.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/launch_config.hpp"
#include "ddprun/user_error.hpp"

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

std::string rank_list(const nlohmann::json& ranks) {
  if (!ranks.is_array() || ranks.empty()) return "none";
  std::string out;
  for (const auto& r : ranks) out += (out.empty() ? "" : ", ") + r.dump();
  return out;
}

std::string job_line(const nlohmann::json& s) {
  std::string line = fmt::format("job: {}, round {}, attempt {}, restarts {} ({} left)", text_or_dash(s, "phase"),
                                 text_or_dash(s, "round"), text_or_dash(s, "attempt"),
                                 text_or_dash(s, "restart_count"), text_or_dash(s, "restarts_left"));
  line += fmt::format(", node {} ({} of {})", text_or_dash(s, "host"), text_or_dash(s, "node_rank"),
                      text_or_dash(s, "nodes"));
  line += fmt::format(", {}", s.value("healthy", false) ? "healthy" : "NOT healthy");
  if (s.contains("hang_timeout") && s["hang_timeout"].is_number()) {
    line += fmt::format(", hang timeout {}", fixed_or_dash(s, "hang_timeout", "{:.0f} s"));
  }
  line += fmt::format("; {} steps in all, slowest rank {}, stragglers: {}", text_or_dash(s, "total_steps"),
                      text_or_dash(s, "slowest_rank"), rank_list(s.value("stragglers", nlohmann::json())));
  return line + "\n";
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

std::string format_status(const nlohmann::json& status) {
  const std::vector<std::string> header = {"rank", "node", "pid", "state", "steps", "steps/s", "since last step", "hung?"};
  std::vector<std::vector<std::string>> rows = {header};
  for (const auto& r : status["ranks"]) {
    rows.push_back({text_or_dash(r, "rank"), text_or_dash(status, "host"), text_or_dash(r, "pid"),
                    text_or_dash(r, "state"), text_or_dash(r, "step"), fixed_or_dash(r, "steps_per_second", "{:.2f}"),
                    fixed_or_dash(r, "since_last_step", "{:.1f} s"), r.value("hung", false) ? "HUNG" : "no"});
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  // Numbers right-aligned, words left-aligned; the last column is not padded.
  const std::vector<bool> right = {true, false, true, false, true, true, true, false};
  std::string out = job_line(status);
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool last = i + 1 == row.size();
      line += right[i] ? fmt::format("{:>{}}", row[i], width[i]) : last ? row[i] : fmt::format("{:<{}}", row[i], width[i]);
      if (!last) line += "  ";
    }
    out += line + "\n";
  }
  return out;
}

int status_command(const std::vector<std::string>& args, std::ostream& out) {
  bool watch = false;
  std::vector<std::string> targets;
  for (const auto& arg : args) {
    if (arg == "--watch" || arg == "-w") {
      watch = true;
    } else if (arg == "--help" || arg == "-h") {
      out << "Usage: ddprun status [--watch] [HOST:]PORT\n"
             "Prints the live view of the ddprun serving --status_port at HOST:PORT (HOST: 127.0.0.1),\n"
             "one row a rank; --watch draws it again every second. (A program named status: ./status.)\n";
      return exit_code::kSuccess;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw config::UsageError(fmt::format("status: unknown option {}; expected --watch, --help and [HOST:]PORT",
                                           shown(arg)));
    } else {
      targets.push_back(arg);
    }
  }
  if (targets.size() != 1) {
    throw config::UsageError(fmt::format(
        "status: {}; {} (to run a program named status, write ./status or ddprun -- status)",
        targets.empty() ? "no [HOST:]PORT given" : "more than one [HOST:]PORT given", kAccepted));
  }
  const StatusTarget target = parse_status_target(targets.front());
  const std::string where = target.host.find(':') != std::string::npos ? fmt::format("[{}]:{}", target.host, target.port)
                                                                         : fmt::format("{}:{}", target.host, target.port);
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  while (true) {
    const std::string table = format_status(status_from_response(fetch(target, where), where));
    // On a terminal each view replaces the last (cursor home, clear the screen).
    out << (watch && terminal ? "\x1b[H\x1b[2J" : "") << table << std::flush;
    if (!watch) return exit_code::kSuccess;
    std::this_thread::sleep_for(kWatchInterval);
    if (!terminal) out << "\n";
  }
}

}  // namespace ddprun::launcher
