// Fuzzes what a peer can send the launcher: rendezvous messages (one JSON line each, decoded as
// RendezvousServer and TcpRendezvous decode them) when the first byte is even, else the agent
// store's binary TCPStore protocol, as chunks from two connections.
#include <string>
#include <string_view>
#include <vector>

#include "store/agent_store.hpp"
#include "core/rendezvous_protocol.hpp"

using namespace ddprun::elastic;

namespace {

template <class T>
void decode(const nlohmann::json& message, const char* field) {
  if (message.contains(field)) (void)message.at(field).get<T>();
}

void rendezvous_line(std::string_view line) {
  const auto message = parse_message(line);
  if (!message) return;
  try {
    decode<NodeSpec>(*message, "node");
    if (message->contains("assignment")) check_assignment(message->at("assignment").get<RoundAssignment>(), 1);
    if (message->contains("outcome")) check_outcome(message->at("outcome").get<JobOutcome>());
    if (message->contains("failure")) check_failure(message->at("failure").get<WorkerFailure>(), 1);
    decode<std::vector<WorkerFailure>>(*message, "failures");
    decode<int>(*message, "round");
    if (message->contains("version")) (void)is_protocol_version(message->at("version"));
    if (message->contains("reason")) parse_stop_reason(message->at("reason").get<std::string>());
    (void)message->dump();
  } catch (const nlohmann::json::exception&) {
  } catch (const std::invalid_argument&) {
  }
}

void agent_store(std::string_view data) {
  AgentStore store;
  store.connect(1);
  store.connect(2);
  std::vector<AgentStore::Send> out;
  std::string why;
  bool open[3] = {false, true, true};
  // Each chunk: one byte (its low bit: the connection; the rest: the length), then the bytes.
  while (!data.empty()) {
    const auto head = static_cast<unsigned char>(data[0]);
    const int client = 1 + (head & 1);
    const std::size_t length = std::min<std::size_t>(head >> 1, data.size() - 1);
    const std::string_view chunk = data.substr(1, length);
    data.remove_prefix(1 + length);
    if (!open[client]) continue;
    if (!store.receive(client, chunk, out, why)) {
      store.disconnect(client);
      open[client] = false;
    }
    if (out.size() > 4096) out.clear();
  }
  store.disconnect(1);
  store.disconnect(2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    std::string_view rest = text;
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      rendezvous_line(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  } else {
    agent_store(text);
  }
  return 0;
}
