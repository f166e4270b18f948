// How a connection opens, to tell PyTorch's TCPStore (torchrun's c10d rendezvous is one) from a
// ddprun node, both ways. A TCPStore 2.x client opens with VALIDATE (a 0 byte and the magic
// number) and then a PING (a 13 byte and a nonce it expects back) before anything else; a ddprun
// node opens with a JSON line ('{'). Pure: no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddprun::elastic {

// VALIDATE's magic number, as PyTorch's TCPStore 2.x clients send it (little-endian).
inline constexpr std::uint32_t kTcpStoreValidationMagic = 0x3C85F7CE;

// VALIDATE then PING with `nonce`: the first bytes of a TCPStore 2.x client.
inline constexpr std::size_t kTcpStoreGreetingBytes = 10;
std::string tcpstore_greeting(std::uint32_t nonce);
// A PING alone; a TCPStore answers it with `nonce`.
std::string tcpstore_ping(std::uint32_t nonce);
// The answer to tcpstore_ping(nonce) (and to a greeting with it).
std::string tcpstore_pong(std::uint32_t nonce);

// The nonce of the pings a ddprun node sends to ask whether an endpoint is a TCPStore
// (tcp_rendezvous.cpp): ddprun's host answers them but does not take them for a torchrun node.
inline constexpr std::uint32_t kDdprunProbeNonce = 0x72706464;  // "ddpr"
// Whether a greeting (classify_opening() said kTcpStore) is such a probe.
bool is_ddprun_probe(std::string_view greeting);

enum class Opening {
  kUndecided,  // too few bytes yet
  kTcpStore,   // a TCPStore client's greeting: the first kTcpStoreGreetingBytes bytes
  kOther,      // anything else (a ddprun node's JSON line, or a stranger)
};
// What the first bytes received on a connection are.
Opening classify_opening(std::string_view first_bytes);

// What a TCPStore server answers to a greeting (its nonce, as tcpstore_pong):
// classify_opening() must have said kTcpStore.
std::string tcpstore_ping_answer(std::string_view greeting);

}  // namespace ddprun::elastic
