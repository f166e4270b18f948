#include "core/rendezvous_protocol.hpp"

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

// Whether every number with a fraction or an exponent fits in an int, except under
// "timestamp" (WorkerFailure's only double). The wire's other numbers are ints, which
// nlohmann's get<int>() converts from a double with a plain cast: undefined behaviour for
// 1e300, found by fuzzing.
bool floats_fit_int(const json& value, bool is_timestamp = false) {
  if (value.is_number_float()) {
    const double d = value.get<double>();
    return is_timestamp || (d > -2147483649.0 && d < 2147483648.0);
  }
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      if (!floats_fit_int(item, key == "timestamp")) return false;
    }
  } else if (value.is_array()) {
    for (const auto& item : value) {
      if (!floats_fit_int(item)) return false;
    }
  }
  return true;
}
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
  if (!floats_fit_int(message)) return std::nullopt;
  return message;
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

}  // namespace ddprun::elastic
