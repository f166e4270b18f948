// The wire format between TcpRendezvous clients and the RendezvousServer: one JSON object per
// line over TCP, each with a "type". With a secret, a client first authenticates (hello,
// challenge, proof: rendezvous_auth.hpp), and every line after that, both ways, is "TAG JSON".
//   client -> server  {"type":"join","version":5,"node":{NodeSpec}}  first, then any of
//                     {"type":"worker_failed","round":R,"failure":{WorkerFailure}}
//                     {"type":"workers_stopped","round":R,"failures":[{WorkerFailure}...]}
//                     {"type":"workers_succeeded","round":R}
//                     {"type":"leave","signal":S}
//   server -> client  {"type":"assign","assignment":{RoundAssignment}}
//                     {"type":"stop","round":R,"reason":"worker_failed","why":"..."}
//                     {"type":"finish","outcome":{JobOutcome}}  (also a refusal; then it closes)
//                     {"type":"spare","place":P,"why":"..."}  (joined; waits as a hot spare)
//   both ways         {"type":"heartbeat"}: a node's every heartbeat_interval; the host's in answer,
//                     when it has sent that node nothing for a while (tcp/channel.hpp)
// A node whose workers succeeded answers a "stop" of that round with "workers_stopped". The
// server refuses a join (or hello) of another version with a "finish", whose shape therefore
// never changes; it is the only thing a peer that has not authenticated is ever told. Field names are those of the C++ structs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/job_coordinator.hpp"

namespace ddprun {
// A failure's kind on the wire is its name (failure_kind.hpp). from_json throws
// std::invalid_argument for a name outside the vocabulary, so that a report holding one is
// refused like any other bad field.
void to_json(nlohmann::json& json, const FailureKindName& kind);
void from_json(const nlohmann::json& json, FailureKindName& kind);
}  // namespace ddprun

namespace ddprun::elastic {

// 2: WorkerFailure has a traceback. 3: NodeSpec and RoundAssignment have agent_store; a node
// whose workers succeeded answers a stop. 4: WorkerFailure has hung. 5: the handshake with a
// secret and tagged lines; a host refuses a failure report of another node's workers. 6:
// WorkerFailure has its kind, cause, exception, location, step and progress; RoundAssignment
// the restart's reason and backoff; JobOutcome a stop_reason and retryable; NodeSpec the restart
// options, which must match the job's. 7: spare. 8: RoundAssignment and JobOutcome have the
// quarantined nodes; NodeSpec the heartbeat settings, which must match the job's. 9:
// RoundAssignment's restart reason is fields (RestartReason), not a line to parse. 10: numbered
// heartbeats and the host's acknowledgement of them (a node fences by them: core/fence.hpp). 11:
// NodeSpec has its snapshot replicator, RoundAssignment the round's (snapshot_peers). 12: NodeSpec
// has chaos (--chaos), which must match the job's.
inline constexpr int kProtocolVersion = 12;

// to_json/from_json for the structs on the wire: every field, under its own name; from_json
// throws nlohmann::json::out_of_range for a missing field and type_error for a wrong type.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(WorkerFailure, rank, local_rank, group_rank, host, pid,
                                   exit_code, signal, signal_from_outside, hung, message, traceback,
                                   error_file, timestamp, kind, retryable, cause, exception, location,
                                   step, progressed)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(QuarantinedNode, node, why)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SnapshotPeer, node, addr, port)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RestartReason, restart, max_restarts, window, after, no_progress,
                                   crash_loop_limit, waited, nodes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RoundAssignment, round, restart_count, group_rank,
                                   group_world_size, base_rank, world_size, master_addr,
                                   master_port, run_id, agent_store, restart_reason, backoff,
                                   quarantined, snapshot_peers)
// With defaults: a "finish" is also the refusal a host of another version sends, and its shape
// before version 6 had no stop_reason.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JobOutcome, exit_code, failures, error, restarts, stop_reason,
                                                retryable, quarantined)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RestartSettings, restart_on_any, backoff_max, crash_loop_limit, window)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NodeSpec, run_id, min_nodes, max_nodes, max_restarts, restart,
                                   heartbeat_interval, heartbeat_timeout, node_rank, nproc, addr, hostname, master_port, hosts_rendezvous,
                                   agent_store, snapshot_node, snapshot_port, chaos)

// Heartbeats: a node numbers its own, {"type":"heartbeat","seq":N}, and the host's answer names
// the last one it received, {"type":"heartbeat","ack":N}: the node's fence rests on when it sent
// the heartbeat acknowledged (core/fence.hpp). Written and recognised as these texts, without
// building or parsing JSON (a host of 10,000 nodes receives 20,000 a second); a heartbeat in any
// other spelling is read as JSON (read_heartbeat_json).
struct Heartbeat {
  enum class Kind { kSeq, kAck };
  Kind kind = Kind::kSeq;
  std::uint64_t number = 0;
  bool operator==(const Heartbeat& o) const { return kind == o.kind && number == o.number; }
};
std::string heartbeat_text(Heartbeat heartbeat);
// The heartbeat a line (without its '\n') is in heartbeat_text's exact spelling; nullopt for
// any other line. Never throws.
std::optional<Heartbeat> read_heartbeat(std::string_view line);
// A parsed message of type "heartbeat": its "seq" or "ack" when it has one that is an unsigned
// integer, else nullopt (a heartbeat that only says the peer is there).
std::optional<Heartbeat> read_heartbeat_json(const nlohmann::json& message);

// Messages nest a few levels (a finish's outcome holds failures); a line nested deeper than this
// is not a message. Without the bound, a peer's line of 1 MiB of '[' built a tree whose
// recursive destruction overflowed the stack.
inline constexpr int kMaxMessageDepth = 32;

// A peer's JSON text (a line of the TCP rendezvous, a key's value in etcd), nested at most
// kMaxMessageDepth deep, every number of which the structs above can hold without narrowing:
// an int (a number with a fraction or exponent only when it is a whole one), but a "timestamp"
// (any number, a double) and a "version" (any integer: compared unnarrowed by
// is_protocol_version, so that 2^32+5 is not taken for 5). nullopt when it is not; never throws.
// Every string in it comes back printable: each control character (C0, DEL, C1) a '?', but the
// newlines and tabs of a "message" or "traceback". Every peer's text passes here, and only here.
std::optional<nlohmann::json> parse_peer_json(std::string_view text);

// One line received (without its '\n') as a message: parse_peer_json's, and an object with a
// string "type". nullopt when it is not one; never throws.
std::optional<nlohmann::json> parse_message(std::string_view line);

// Whether a peer's "version" is kProtocolVersion, compared as the integer it is.
bool is_protocol_version(const nlohmann::json& version);

// A peer's reports, checked before anything acts on them; each throws std::invalid_argument
// naming the field. A failure: exit code 1 to 255 (the job's exit code on every node: 256
// would exit 0), signal 0 to 64, local rank 0 to nproc - 1, a host name of at most
// kMaxHostChars (its control characters parse_peer_json has already replaced); its kind was
// checked as it was read (from_json of FailureKindName).
void check_failure(const WorkerFailure& failure, int nproc);
// What a node takes from its host: group rank and ranks inside the world, MASTER_PORT a port,
// MASTER_ADDR given; `nproc`: this node's workers.
void check_assignment(const RoundAssignment& assignment, int nproc);
// The job's outcome: an exit code 0 to 255 (a node exits with it), restarts not negative.
void check_outcome(const JobOutcome& outcome);

// Throws std::invalid_argument for a name to_string(StopReason) does not give.
StopReason parse_stop_reason(std::string_view name);

// A coordinator's message as the server sends it.
nlohmann::json to_wire(const Message& message);

// A message's line as it is sent (without its newline): compact; text that is not UTF-8 (an
// --rdzv_id, a worker's error message) replaced, not thrown.
std::string wire_text(const nlohmann::json& message);

// The lines of a round's broadcasts, each wire_text(to_wire(message)) to the byte, with the JSON
// built once a round instead of once a node: a broadcast to 10,000 nodes built and serialised
// 10,000 JSON objects. A round's assignments differ only in group_rank and base_rank (adjacent
// keys), so the rest is kept as text around them; its stops are all the same.
class BroadcastLines {
 public:
  std::string assign(const RoundAssignment& assignment);
  const std::string& stop(const Stop& stop);

 private:
  std::optional<RoundAssignment> shape_;  // the assignment head_ and tail_ were made from
  std::string head_, tail_;
  std::optional<Stop> stop_;  // the stop stop_line_ was made from
  std::string stop_line_;
};

}  // namespace ddprun::elastic
