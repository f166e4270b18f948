#include "etcd/etcd_protocol.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic::etcd {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::string escape(std::string_view run_id) {
  std::string out;
  for (char c : run_id) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += kAlphabet[v >> 6 & 63];
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) throw std::invalid_argument("base64 text of a length that is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad > 0 || (v[j] = sextet(c)) < 0) throw std::invalid_argument("not base64");
    }
    const unsigned bits = v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
    out += static_cast<char>(bits >> 16 & 255);
    if (pad < 2) out += static_cast<char>(bits >> 8 & 255);
    if (pad < 1) out += static_cast<char>(bits & 255);
  }
  return out;
}

std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // etcd: every key
}

JobKeys::JobKeys(std::string_view run_id) : prefix_(fmt::format("{}{}/", kRoot, escape(run_id))) {}

std::string JobKeys::node(std::string_view id) const { return fmt::format("{}nodes/{}", prefix_, id); }

std::string JobKeys::event(std::string_view id, std::uint64_t seq) const {
  return fmt::format("{}events/{}/{:016}", prefix_, id, seq);
}

std::string JobKeys::message(std::string_view to, std::string_view leader, std::uint64_t seq) const {
  return fmt::format("{}to/{}/{}-{:016}", prefix_, to, leader, seq);
}

JobKeys::Parsed JobKeys::parse(std::string_view key) const {
  Parsed p;
  if (key.substr(0, prefix_.size()) != prefix_) return p;
  key.remove_prefix(prefix_.size());
  const auto under = [&](std::string_view folder, Kind kind, bool has_tail) {
    if (key.substr(0, folder.size()) != folder) return false;
    std::string_view rest = key.substr(folder.size());
    const auto slash = rest.find('/');
    if (has_tail != (slash != std::string_view::npos)) return false;
    std::string_view node = rest.substr(0, slash);
    if (node.empty() || (has_tail && slash + 1 == rest.size())) return false;
    p.kind = kind;
    p.node = node;
    return true;
  };
  if (key == "leader") {
    p.kind = Kind::kLeader;
  } else if (key == "state") {
    p.kind = Kind::kState;
  } else if (!under("nodes/", Kind::kNode, false) && !under("events/", Kind::kEvent, true)) {
    under("to/", Kind::kMessage, true);
  }
  return p;
}

std::string make_node_id(std::string_view hostname, long pid, std::uint32_t random) {
  std::string host;
  for (char c : hostname) host += c == '/' || c == '%' ? '_' : c;
  return fmt::format("{}-{}-{:08x}", host, pid, random);
}

std::int64_t json_int(const nlohmann::json& object, const char* field) {
  const auto it = object.find(field);
  if (it == object.end()) return 0;
  const auto refuse = [&] {
    return std::runtime_error(fmt::format("etcd sent {}={}, not a 64-bit integer", field, it->dump()));
  };
  if (it->is_number_integer() && !it->is_number_unsigned()) return it->get<std::int64_t>();
  if (it->is_number_unsigned()) {
    const auto value = it->get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) throw refuse();
    return static_cast<std::int64_t>(value);
  }
  if (!it->is_string()) throw refuse();
  const auto& text = it->get_ref<const std::string&>();
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) throw refuse();
  return value;
}

WatchEvent parse_kv(const nlohmann::json& kv, bool deleted) {
  WatchEvent e;
  e.deleted = deleted;
  e.key = base64_decode(kv.value("key", ""));
  e.value = base64_decode(kv.value("value", ""));
  e.mod_revision = json_int(kv, "mod_revision");
  e.version = json_int(kv, "version");
  e.create_revision = json_int(kv, "create_revision");
  return e;
}

std::vector<WatchEvent> parse_watch_message(const nlohmann::json& message) {
  if (message.contains("error")) {
    throw std::runtime_error(fmt::format("etcd: {}", message["error"].value("message", message["error"].dump())));
  }
  const nlohmann::json& result = message.at("result");
  if (result.value("canceled", false)) {
    throw std::runtime_error(fmt::format("etcd canceled the watch: {}", result.value("cancel_reason", "no reason given")));
  }
  std::vector<WatchEvent> events;
  for (const auto& e : result.value("events", nlohmann::json::array())) {
    events.push_back(parse_kv(e.at("kv"), e.value("type", "PUT") == "DELETE"));
  }
  return events;
}

nlohmann::json create_and_read_txn(const std::string& key, const std::string& value, std::int64_t lease,
                                   const std::string& range_prefix) {
  const nlohmann::json read = {
      {"request_range", {{"key", base64_encode(range_prefix)}, {"range_end", base64_encode(prefix_end(range_prefix))}}}};
  return {{"compare", {{{"key", base64_encode(key)}, {"target", "CREATE"}, {"create_revision", "0"}}}},
          {"success",
           {{{"request_put", {{"key", base64_encode(key)}, {"value", base64_encode(value)}, {"lease", std::to_string(lease)}}}},
            read}},
          {"failure", {read}}};
}

nlohmann::json put_op(const std::string& key, const std::string& value, std::int64_t lease) {
  nlohmann::json put = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return {{"request_put", put}};
}

// Times are "timestamp"s, the one key whose number parse_peer_json takes with a fraction; node
// revisions are strings, as the gateway writes 64-bit numbers.
std::string state_value(const JobState& state, double to_epoch) {
  nlohmann::json suspects = nlohmann::json::array();
  for (const auto& [node, failures] : state.history.suspects) {
    nlohmann::json list = nlohmann::json::array();
    for (const SuspectFailure& f : failures) list.push_back({{"timestamp", f.at}, {"kind", f.kind}});
    suspects.push_back({{"node", std::to_string(node)}, {"failures", list}});
  }
  nlohmann::json quarantined = nlohmann::json::array();
  for (const QuarantinedNode& q : state.history.quarantined) quarantined.push_back({{"node", q.node}, {"why", q.why}});
  nlohmann::json value = {{"rounds", state.rounds},         {"restarts", state.restarts},
                          {"suspects", suspects},             {"quarantined", quarantined},
                          {"restart_reason", state.history.restart_reason}};
  if (const auto& r = state.history.restart) {
    nlohmann::json times = nlohmann::json::array();
    for (double at : r->restarts) times.push_back({{"timestamp", at + to_epoch}});
    value["restart_history"] = {{"restarts", times},
                                {"no_progress", r->no_progress},
                                {"last_exception", r->last_exception},
                                {"last_counted", r->last_counted}};
  }
  return value.dump();
}

JobState parse_state(const nlohmann::json& value, double from_epoch) {
  JobState state;
  state.rounds = value.value("rounds", 0);
  state.restarts = value.value("restarts", 0);
  if (const auto r = value.find("restart_reason"); r != value.end() && r->is_object()) {
    state.history.restart_reason = r->get<RestartReason>();
  }
  for (const auto& s : value.value("suspects", nlohmann::json::array())) {
    std::vector<SuspectFailure>& failures = state.history.suspects[std::stoull(s.at("node").get<std::string>())];
    for (const auto& f : s.at("failures")) {
      failures.push_back({f.at("timestamp").get<double>(), f.at("kind").get<FailureKindName>()});
    }
  }
  for (const auto& q : value.value("quarantined", nlohmann::json::array())) {
    state.history.quarantined.push_back({q.at("node").get<std::string>(), q.at("why").get<std::string>()});
  }
  if (const auto r = value.find("restart_history"); r != value.end()) {
    RestartPolicy::History h;
    for (const auto& t : r->at("restarts")) h.restarts.push_back(t.at("timestamp").get<double>() + from_epoch);
    h.no_progress = r->at("no_progress").get<int>();
    h.last_exception = r->at("last_exception").get<std::string>();
    h.last_counted = r->value("last_counted", "");  // absent in an older ddprun's state
    state.history.restart = h;
  }
  return state;
}

}  // namespace ddprun::elastic::etcd
