// The wire format between TcpRendezvous clients and the RendezvousServer: one JSON object per
// line over TCP, each with a "type".
//   client -> server  {"type":"join","version":1,"node":{NodeSpec}}  first, then any of
//                     {"type":"worker_failed","round":R,"failure":{WorkerFailure}}
//                     {"type":"workers_stopped","round":R,"failures":[{WorkerFailure}...]}
//                     {"type":"workers_succeeded","round":R}
//                     {"type":"leave","signal":S}
//   server -> client  {"type":"assign","assignment":{RoundAssignment}}
//                     {"type":"stop","round":R,"reason":"worker_failed","why":"..."}
//                     {"type":"finish","outcome":{JobOutcome}}  (also a refusal; then it closes)
//   both ways         {"type":"heartbeat"} every heartbeat_interval
// The server refuses a join of another version with a "finish", whose shape therefore never
// changes. Field names are those of the C++ structs.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "ddprun/job_coordinator.hpp"

namespace ddprun::elastic {

inline constexpr int kProtocolVersion = 1;

void to_json(nlohmann::json& j, const WorkerFailure& f);
void from_json(const nlohmann::json& j, WorkerFailure& f);
void to_json(nlohmann::json& j, const RoundAssignment& a);
void from_json(const nlohmann::json& j, RoundAssignment& a);
void to_json(nlohmann::json& j, const JobOutcome& o);
void from_json(const nlohmann::json& j, JobOutcome& o);
void to_json(nlohmann::json& j, const NodeSpec& s);
void from_json(const nlohmann::json& j, NodeSpec& s);

// Throws std::invalid_argument for a name to_string(StopReason) does not give.
StopReason parse_stop_reason(std::string_view name);

// A coordinator's message as the server sends it.
nlohmann::json to_wire(const Message& message);

}  // namespace ddprun::elastic
