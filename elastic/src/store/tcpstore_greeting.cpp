#include "store/tcpstore_greeting.hpp"

#include <cstring>

namespace ddprun::elastic {

namespace {
constexpr char kValidate = 0;
constexpr char kPing = 13;  // QueryType::PING of torch 2.x

std::string little_endian(std::uint32_t value) {
  std::string bytes(sizeof value, '\0');
  std::memcpy(bytes.data(), &value, sizeof value);  // the TCPStore protocol is host order: x86 and ARM are little
  return bytes;
}
}  // namespace

std::string tcpstore_ping(std::uint32_t nonce) { return std::string(1, kPing) + little_endian(nonce); }

std::string tcpstore_pong(std::uint32_t nonce) { return little_endian(nonce); }

std::string tcpstore_greeting(std::uint32_t nonce) {
  return std::string(1, kValidate) + little_endian(kTcpStoreValidationMagic) + tcpstore_ping(nonce);
}

Opening classify_opening(std::string_view first_bytes) {
  const std::string validate = std::string(1, kValidate) + little_endian(kTcpStoreValidationMagic) + kPing;
  const std::string_view head = first_bytes.substr(0, validate.size());
  if (head != std::string_view(validate).substr(0, head.size())) return Opening::kOther;
  return first_bytes.size() < kTcpStoreGreetingBytes ? Opening::kUndecided : Opening::kTcpStore;
}

bool is_ddprun_probe(std::string_view greeting) { return tcpstore_ping_answer(greeting) == tcpstore_pong(kDdprunProbeNonce); }

std::string tcpstore_ping_answer(std::string_view greeting) {
  return std::string(greeting.substr(kTcpStoreGreetingBytes - sizeof(std::uint32_t), sizeof(std::uint32_t)));
}

}  // namespace ddprun::elastic
