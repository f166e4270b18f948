#include "ddprun/rendezvous_protocol.hpp"

#include <stdexcept>
#include <string>

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
struct TooDeep {};
}  // namespace

std::optional<json> parse_message(std::string_view line) {
  json message;
  try {
    message = json::parse(
        line.begin(), line.end(),
        [](int depth, json::parse_event_t, json&) {
          if (depth > kMaxMessageDepth) throw TooDeep{};
          return true;
        },
        /*allow_exceptions=*/false);
  } catch (const TooDeep&) {
    return std::nullopt;
  }
  if (!message.is_object() || !message.contains("type") || !message["type"].is_string()) return std::nullopt;
  return message;
}

namespace {
struct WireMessage {
  json operator()(const Assign& m) const { return {{"type", "assign"}, {"assignment", m.assignment}}; }
  json operator()(const Stop& m) const {
    return {{"type", "stop"}, {"round", m.round}, {"reason", to_string(m.reason)}, {"why", m.why}};
  }
  json operator()(const Finish& m) const { return {{"type", "finish"}, {"outcome", m.outcome}}; }
};
}  // namespace

json to_wire(const Message& message) { return std::visit(WireMessage{}, message); }

}  // namespace ddprun::elastic
