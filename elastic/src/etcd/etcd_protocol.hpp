// The pure parts of the etcd rendezvous: the job's key layout under its prefix, and the
// encodings of etcd's v3 JSON gateway (keys and values in base64, 64-bit numbers as strings,
// watch messages). No I/O.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_coordinator.hpp"

namespace ddprun::elastic::etcd {

std::string base64_encode(std::string_view bytes);
// Throws std::invalid_argument on text that is not base64.
std::string base64_decode(std::string_view text);

// The smallest key after every key that starts with `prefix`: etcd's range_end for a prefix.
std::string prefix_end(std::string prefix);

// One job's keys. The run id is escaped ('%' and '/' as %25 and %2F), so that no job's prefix
// is the prefix of another's ("a" and "a/b").
//   <root>/<run id>/leader           the node that runs the job's coordinator (its lease)
//   <root>/<run id>/state            rounds and restarts so far, for the next leader (no lease)
//   <root>/<run id>/nodes/<node>     a node's NodeSpec (its lease): present means alive
//   <root>/<run id>/events/<node>/N  what a node tells the leader, in order (its lease)
//   <root>/<run id>/to/<node>/L-N    what leader L tells a node, in order (the leader's lease)
class JobKeys {
 public:
  static constexpr std::string_view kRoot = "/ddprun/v1/";
  explicit JobKeys(std::string_view run_id);

  const std::string& prefix() const { return prefix_; }
  std::string leader() const { return prefix_ + "leader"; }
  std::string state() const { return prefix_ + "state"; }
  std::string node(std::string_view id) const;
  std::string event(std::string_view id, std::uint64_t seq) const;
  std::string message(std::string_view to, std::string_view leader, std::uint64_t seq) const;

  enum class Kind { kOther, kLeader, kState, kNode, kEvent, kMessage };
  struct Parsed {
    Kind kind = Kind::kOther;
    std::string node;  // kNode, kEvent: whose; kMessage: to whom
  };
  Parsed parse(std::string_view key) const;

 private:
  std::string prefix_;
};

// "<hostname>-<pid>-<8 hex digits>": unique among the job's nodes, free of '/'.
std::string make_node_id(std::string_view hostname, long pid, std::uint32_t random);

// One change seen by a watch.
struct WatchEvent {
  bool deleted = false;
  std::string key;
  std::string value;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;  // 1 when this put created the key; 0 for a delete
  std::int64_t create_revision = 0;  // the revision that created the key: the same for every reader; 0 for a delete
};
// A key-value as the gateway gives it ({"key": b64, "value": b64, "mod_revision": "7", ...}).
WatchEvent parse_kv(const nlohmann::json& kv, bool deleted = false);
// One message of a /v3/watch stream ({"result": {"events": [...], ...}}). Throws
// std::runtime_error when the gateway reports an error or the watch was canceled (compacted).
std::vector<WatchEvent> parse_watch_message(const nlohmann::json& message);

// The job's state key, what a new leader goes on from: the rounds held and restarts made, and
// the coordinator's JobHistory (nodes by the revision that created their key, which every
// leader sees alike). The restarts' times are on the writer's monotonic clock in `history` and
// seconds since the epoch in the key: `to_epoch` is added when writing and `from_epoch` when
// reading (the host's epoch time minus its monotonic time, and the reverse), so that a leader on
// another host reads them on its own clock.
struct JobState {
  int rounds = 0;
  int restarts = 0;
  JobHistory history;
};
std::string state_value(const JobState& state, double to_epoch);
// A state key's JSON as parse_peer_json read it; fields it lacks keep their defaults (the state
// of a leader before version 8 has only rounds and restarts). Throws nlohmann::json::exception
// for a field of the wrong type.
JobState parse_state(const nlohmann::json& value, double from_epoch);

// The gateway writes 64-bit integers as strings and leaves out zero values. Anything else that
// is not a whole signed 64-bit integer (a fraction, text, 2^63) throws, naming the field.
std::int64_t json_int(const nlohmann::json& object, const char* field);

// The body of a transaction that puts `key` with `lease` unless it exists, and reads the
// whole `range_prefix` in the same revision (the election of the leader with a snapshot).
nlohmann::json create_and_read_txn(const std::string& key, const std::string& value, std::int64_t lease,
                                   const std::string& range_prefix);

// A transaction's put of `value` at `key`, on `lease` (0: none): {"request_put": {...}}; its
// "request_put" alone is the body of /v3/kv/put.
nlohmann::json put_op(const std::string& key, const std::string& value, std::int64_t lease);

}  // namespace ddprun::elastic::etcd
