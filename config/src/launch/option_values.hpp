// The grammars of the options whose values are more than a number, a flag or a word, each with
// its inverse: what --print_config writes, which each parser reads back the same. Private to
// config/src/launch/: resolve_config() parses with them, the option table prints with them.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/launch_config.hpp"

namespace ddprun::config {

// --nnodes: "N" or "MIN:MAX", 1 to 1 << 20 nodes, MIN <= MAX. Returns {MIN, MAX}.
std::pair<int, int> parse_nnodes(const std::string& text);
std::string nnodes_text(int min_nodes, int max_nodes);

// --hang_timeout: "off", "auto", "auto:MIN_SECONDS" or a number of seconds greater than 0.
HangTimeout parse_hang_timeout(const std::string& text);
nlohmann::json hang_timeout_json(const HangTimeout& timeout);

// --redirects, --tee: "0".."3", or LOCAL_RANK:MASK,... `name`: the option, for messages.
StreamSelection parse_streams(const std::string& name, const std::string& text);
std::string streams_text(const StreamSelection& selection);

// --local_ranks_filter: local ranks 0..nproc-1 separated by commas.
std::set<int> parse_rank_list(const std::string& name, const std::string& text, int nproc);
std::string rank_list_text(const std::set<int>& ranks);

// --duplicate_std{out,err}_filters: torchrun's comma_separated_list, ",," for a comma; "" none.
std::vector<std::string> parse_filters(const std::string& text);
std::string filters_text(const std::vector<std::string>& filters);

// --signals_to_handle: names of the signals ddprun handles, separated by commas.
std::set<int> parse_signals(const std::string& text);

// --snapshot_signal: "off" (or empty): 0; else a signal that --signals_to_handle accepts, as
// "SIGUSR1", "USR1" (any case) or its number.
int parse_snapshot_signal(const std::string& text);

// --logs_specs, --event_log_handler name Python plug-ins of torchrun's: "" and `accepted` (its
// default) pass, anything else is refused with what ddprun does `instead`.
void check_python_plugin(const std::string& key, const std::string& value, const char* what, const char* accepted,
                         const char* instead);

}  // namespace ddprun::config
