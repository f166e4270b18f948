#include "core/rendezvous_protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

#include "ddprun/input_limits.hpp"

namespace ddprun {

void to_json(nlohmann::json& json, const FailureKindName& kind) { json = kind.name(); }

void from_json(const nlohmann::json& json, FailureKindName& kind) {
  const auto named = FailureKindName::parse(json.get<std::string>());
  if (!named) {
    throw std::invalid_argument(fmt::format("a failure's kind '{}' is neither one of ddprun's nor a --failure_rules "
                                            "name",
                                            shown(json.get<std::string>())));
  }
  kind = *named;
}

}  // namespace ddprun

namespace ddprun::elastic {

using nlohmann::json;

StopReason parse_stop_reason(std::string_view name) {
  for (StopReason r : {StopReason::kWorkerFailed, StopReason::kNodeLost, StopReason::kMembershipChange,
                       StopReason::kShutdown}) {
    if (name == to_string(r)) return r;
  }
  throw std::invalid_argument("unknown stop reason '" + std::string(name) + "'");
}

namespace {

// The fields that hold seconds in a double (WorkerFailure's timestamp, RoundAssignment's backoff,
// RestartSettings' backoff_max and window, RestartReason's window and waited, NodeSpec's heartbeat
// settings): any finite number.
bool holds_seconds(std::string_view key) {
  for (std::string_view seconds : {"timestamp", "backoff", "backoff_max", "window", "waited", "heartbeat_interval",
                                   "heartbeat_timeout"}) {
    if (key == seconds) return true;
  }
  return false;
}

// Whether every number fits the field that holds it without narrowing (see parse_peer_json).
// nlohmann's get<int>() casts: 2^32+5 became 5, and 1e300 was undefined behaviour (found by
// fuzzing). Every other number is an int: a fraction there would be cut.
bool numbers_fit(const json& value, std::string_view key = {}) {
  if (value.is_object()) {
    for (const auto& [name, item] : value.items()) {
      if (!numbers_fit(item, name)) return false;
    }
    return true;
  }
  if (value.is_array()) {
    return std::all_of(value.begin(), value.end(), [](const json& item) { return numbers_fit(item); });
  }
  if (!value.is_number()) return true;
  if (holds_seconds(key)) return std::isfinite(value.get<double>());
  if (key == "version") return value.is_number_integer();
  if (value.is_number_unsigned()) return value.get<std::uint64_t>() <= std::numeric_limits<int>::max();
  if (value.is_number_integer()) {
    const std::int64_t i = value.get<std::int64_t>();
    return i >= std::numeric_limits<int>::min() && i <= std::numeric_limits<int>::max();
  }
  const double d = value.get<double>();
  return d > -2147483649.0 && d < 2147483648.0 && d == std::trunc(d);
}

void expect(bool ok, const char* what, long long value) {
  if (!ok) throw std::invalid_argument(fmt::format("{} {} is out of range", what, value));
}
}  // namespace

namespace {
// Whether TEXT holds a value (a scalar, a string, a key, an array or an object) inside more than
// kMaxMessageDepth open arrays and objects: checked in one pass before nlohmann builds anything,
// so that a line nested 100,000 deep costs a scan, not a recursion. A parse with nlohmann's
// depth callback did the same but cost a third more per line (the host of 10,000 nodes parses
// a join and a workers_stopped of every node a round). Malformed text is left to the parser.
bool nested_too_deep(std::string_view text) {
  int open = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ':') continue;
    if (c == ']' || c == '}') {
      --open;
      continue;
    }
    if (open > kMaxMessageDepth) return true;
    if (c == '[' || c == '{') {
      ++open;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;  // an escaped character, a quote among them
      }
    }
  }
  return false;
}

// Whether the character at text[i] is a control character: C0 and DEL, and C1 (U+0080 to
// U+009F, two bytes in UTF-8, which the parser has checked), which some terminals also obey
// (U+009B is CSI). Sets `size` to its bytes.
bool control_at(const std::string& text, std::size_t i, std::size_t& size) {
  const auto c = static_cast<unsigned char>(text[i]);
  size = 1;
  if (c < 0x20 || c == 0x7f) return true;
  if (c != 0xc2 || i + 1 >= text.size()) return false;
  const auto next = static_cast<unsigned char>(text[i + 1]);
  size = 2;
  return next >= 0x80 && next <= 0x9f;
}

// A failure's message and traceback keep their lines: the summary shows them line by line,
// each indented under ddprun's own.
bool holds_lines(std::string_view key) { return key == "message" || key == "traceback"; }

// Every string of a peer's JSON with its control characters replaced by '?': any of them may
// reach a console (a failure's host, kind, cause, message, traceback; a stop's why; a finish's
// error), where an ESC sequence would move the cursor, recolour or clear it, and a newline would
// start a line of the peer's own ("ddprun: ..." forged). The one place a peer's text is made
// printable; a newline and a tab stay where holds_lines() says.
void make_printable(json& value, std::string_view key) {
  if (value.is_object()) {
    for (auto& [name, item] : value.items()) make_printable(item, name);
  } else if (value.is_array()) {
    for (json& item : value) make_printable(item, key);
  } else if (value.is_string()) {
    std::string& text = value.get_ref<std::string&>();
    const bool lines = holds_lines(key);
    std::size_t kept = 0;  // in place: a replacement is never longer than what it replaces
    std::size_t size = 1;
    for (std::size_t i = 0; i < text.size(); i += size) {
      if (control_at(text, i, size) && !(lines && (text[i] == '\n' || text[i] == '\t'))) {
        text[kept++] = '?';
      } else {
        for (std::size_t k = 0; k < size; ++k) text[kept++] = text[i + k];
      }
    }
    text.resize(kept);
  }
}
}  // namespace

std::optional<json> parse_peer_json(std::string_view text) {
  if (nested_too_deep(text)) return std::nullopt;
  json value = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || !numbers_fit(value)) return std::nullopt;
  make_printable(value, {});
  return value;
}

std::optional<json> parse_message(std::string_view line) {
  std::optional<json> message = parse_peer_json(line);
  if (!message || !message->is_object() || !message->contains("type") || !(*message)["type"].is_string()) {
    return std::nullopt;
  }
  return message;
}

bool is_protocol_version(const json& version) {
  if (version.is_number_unsigned()) return version.get<std::uint64_t>() == kProtocolVersion;
  return version.is_number_integer() && version.get<std::int64_t>() == kProtocolVersion;
}

void check_failure(const WorkerFailure& failure, int nproc) {
  expect(failure.exit_code >= 1 && failure.exit_code <= 255, "a failure's exit code", failure.exit_code);
  expect(failure.signal >= 0 && failure.signal <= 64, "a failure's signal", failure.signal);
  expect(failure.local_rank >= 0 && failure.local_rank < nproc, "a failure's local rank", failure.local_rank);
  if (failure.host.size() > kMaxHostChars) {
    throw std::invalid_argument(fmt::format("a failure's host '{}' is not a host name", shown(failure.host)));
  }
}

void check_assignment(const RoundAssignment& a, int nproc) {
  expect(a.round >= 1, "the round", a.round);
  expect(a.restart_count >= 0, "the restart count", a.restart_count);
  expect(a.group_world_size >= 1, "the number of nodes", a.group_world_size);
  expect(a.group_rank >= 0 && a.group_rank < a.group_world_size, "the group rank", a.group_rank);
  expect(a.base_rank >= 0 && a.base_rank <= a.world_size - nproc, "the first rank", a.base_rank);
  expect(a.master_port >= 1 && a.master_port <= 65535, "MASTER_PORT", a.master_port);
  if (a.master_addr.empty()) throw std::invalid_argument("MASTER_ADDR is empty");
  expect(a.snapshot_peers.empty() || static_cast<int>(a.snapshot_peers.size()) == a.group_world_size,
         "the number of snapshot replicators", static_cast<int>(a.snapshot_peers.size()));
  for (const SnapshotPeer& peer : a.snapshot_peers) {
    expect(peer.port >= 1 && peer.port <= 65535, "a snapshot replicator's port", peer.port);
  }
}

void check_outcome(const JobOutcome& outcome) {
  expect(outcome.exit_code >= 0 && outcome.exit_code <= 255, "the job's exit code", outcome.exit_code);
  expect(outcome.restarts >= 0, "the job's restarts", outcome.restarts);
}

namespace {
struct WireMessage {
  json operator()(const Assign& m) const { return {{"type", "assign"}, {"assignment", m.assignment}}; }
  json operator()(const Stop& m) const {
    return {{"type", "stop"}, {"round", m.round}, {"reason", to_string(m.reason)}, {"why", m.why}};
  }
  json operator()(const Finish& m) const { return {{"type", "finish"}, {"outcome", m.outcome}}; }
  json operator()(const Spare& m) const { return {{"type", "spare"}, {"place", m.place}, {"why", m.why}}; }
};
}  // namespace

json to_wire(const Message& message) { return std::visit(WireMessage{}, message); }

std::string wire_text(const json& message) { return message.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {
bool same_but_ranks(const RoundAssignment& a, const RoundAssignment& b) {
  const auto rest = [](const RoundAssignment& x) {
    return std::tie(x.round, x.restart_count, x.group_world_size, x.world_size, x.master_addr, x.master_port,
                    x.run_id, x.agent_store, x.restart_reason, x.backoff, x.snapshot_peers);
  };
  return rest(a) == rest(b);
}
}  // namespace

std::string BroadcastLines::assign(const RoundAssignment& assignment) {
  constexpr std::string_view kBaseRank = R"("base_rank":)";
  constexpr std::string_view kRanks = R"("base_rank":0,"group_rank":0)";
  if (!shape_ || !same_but_ranks(*shape_, assignment)) {
    RoundAssignment shape = assignment;
    shape.base_rank = shape.group_rank = 0;
    const std::string text = wire_text(to_wire(Assign{0, shape}));
    // A key with its quotes and colon cannot occur inside a string value, whose quotes are
    // escaped: the first match is the key.
    const std::size_t at = text.find(kRanks);
    if (at == std::string::npos) return wire_text(to_wire(Assign{0, assignment}));  // the keys no longer adjacent
    head_ = text.substr(0, at + kBaseRank.size());
    tail_ = text.substr(at + kRanks.size());
    shape_ = std::move(shape);
  }
  return fmt::format(R"({}{},"group_rank":{}{})", head_, assignment.base_rank, assignment.group_rank, tail_);
}

const std::string& BroadcastLines::stop(const Stop& stop) {
  if (!stop_ || stop_->round != stop.round || stop_->reason != stop.reason || stop_->why != stop.why) {
    stop_line_ = wire_text(to_wire(stop));
    stop_ = stop;
  }
  return stop_line_;
}

namespace {
constexpr std::string_view kSeqPrefix = R"({"type":"heartbeat","seq":)";
constexpr std::string_view kAckPrefix = R"({"type":"heartbeat","ack":)";
}  // namespace

std::string heartbeat_text(Heartbeat heartbeat) {
  std::string text(heartbeat.kind == Heartbeat::Kind::kSeq ? kSeqPrefix : kAckPrefix);
  text += std::to_string(heartbeat.number);
  text += '}';
  return text;
}

std::optional<Heartbeat> read_heartbeat(std::string_view line) {
  Heartbeat heartbeat;
  if (line.substr(0, kSeqPrefix.size()) == kSeqPrefix) {
    heartbeat.kind = Heartbeat::Kind::kSeq;
  } else if (line.substr(0, kAckPrefix.size()) == kAckPrefix) {
    heartbeat.kind = Heartbeat::Kind::kAck;
  } else {
    return std::nullopt;
  }
  const std::string_view digits = line.substr(kSeqPrefix.size(), line.size() - kSeqPrefix.size() - 1);
  if (line.back() != '}' || digits.empty() || digits.front() < '0' || digits.front() > '9') {
    return std::nullopt;
  }
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), heartbeat.number);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return heartbeat;
}

std::optional<Heartbeat> read_heartbeat_json(const nlohmann::json& message) {
  for (const auto& [name, kind] : {std::pair{"seq", Heartbeat::Kind::kSeq}, {"ack", Heartbeat::Kind::kAck}}) {
    const auto it = message.find(name);
    if (it != message.end() && it->is_number_unsigned()) return Heartbeat{kind, it->get<std::uint64_t>()};
  }
  return std::nullopt;
}

}  // namespace ddprun::elastic
