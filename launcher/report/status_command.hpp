// `ddprun status [--watch] [HOST:]PORT...`: the live view of a running ddprun (its --status_port)
// in a terminal, one row a rank, with no curl or jq: GET /status over one TCP connection, drawn as
// a table. Each ddprun shows its own node's ranks; given one address per node, the table has the
// job's ranks, and the job's pace (total steps, slowest rank, stragglers) is of all of them.
// `--watch` draws it again every second until interrupted. It starts nothing.
//
// ddprun takes `status` as this command only as its very first argument; a program named
// `status` is run as `./status`, by its full path, or after `--` (`ddprun -- status`).
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::launcher {

inline constexpr const char* kStatusCommand = "status";

struct StatusTarget {
  std::string host = "127.0.0.1";  // --status_addr's default
  std::string port;
};

// "PORT", "HOST:PORT", "[IPV6]:PORT", also as the URL ddprun prints ("http://HOST:PORT/status").
// Throws config::UsageError naming the value and what is accepted.
StatusTarget parse_status_target(std::string_view text);

// The table of the nodes' /status answers: the job line, then one row a rank, by rank (rank,
// node, pid, state, steps, steps/s, since last step, hung?); "-" where /status has no value.
// Lines end in '\n'. Throws nlohmann::json::exception where a field has another type than
// ddprun writes (status_command() says so in one line).
std::string format_status(const std::vector<nlohmann::json>& nodes);

// The body of an HTTP/1.1 response to GET /status: throws ddprun::UserError (exit 69) when it is
// not a 200 with a JSON object, naming `where`.
nlohmann::json status_from_response(std::string_view response, const std::string& where);

// `args`: what follows `status`. Returns the exit code: 0; 64 for bad arguments, 69 when the
// server cannot be reached or does not answer as ddprun does (each one line on stderr, thrown as
// ddprun::UserError for main() to print).
int status_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace ddprun::launcher
