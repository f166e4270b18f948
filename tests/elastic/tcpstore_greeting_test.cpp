// How a connection opens: a PyTorch TCPStore client's greeting against a ddprun node's line.
#include "store/tcpstore_greeting.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace ddprun::elastic {
namespace {

using namespace std::string_literals;

// The first bytes torchrun 2.11 (--rdzv_backend=c10d) sent to a listener on its endpoint:
// VALIDATE with the magic number, then PING with its nonce.
const std::string kTorchrun211 = "\x00\xce\xf7\x85<\rY?\x00\x00"s;

TEST_CASE("a TCPStore client's greeting is told from a ddprun node's first line") {
  struct Case {
    std::string bytes;
    Opening expect;
  };
  const std::vector<Case> cases = {
      {"", Opening::kUndecided},
      {"\x00"s, Opening::kUndecided},
      {kTorchrun211.substr(0, 5), Opening::kUndecided},  // VALIDATE alone: the PING may follow
      {kTorchrun211.substr(0, 9), Opening::kUndecided},
      {kTorchrun211, Opening::kTcpStore},
      {kTorchrun211 + "\x02", Opening::kTcpStore},
      {"{\"type\":\"join\"", Opening::kOther},
      {"{\"type\":\"hello\",\"version\":5}\n", Opening::kOther},
      {"\x00\xce\xf7\x85\x3d"s, Opening::kOther},           // another magic number
      {"\x00\xce\xf7\x85<\x02"s, Opening::kOther},          // VALIDATE, then not a PING (a SET)
      {"\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"s, Opening::kOther},  // torch 1.x's first query
  };
  for (const Case& c : cases) {
    CAPTURE(c.bytes.size());
    CHECK(classify_opening(c.bytes) == c.expect);
  }
  CHECK(tcpstore_ping_answer(kTorchrun211) == "Y?\x00\x00"s);
  CHECK(tcpstore_greeting(0x3F59) == kTorchrun211);
}

TEST_CASE("a ddprun node's probe is a greeting that its host answers and recognises") {
  const std::string probe = tcpstore_greeting(kDdprunProbeNonce);
  CHECK(probe.size() == kTcpStoreGreetingBytes);
  CHECK(classify_opening(probe) == Opening::kTcpStore);
  CHECK(is_ddprun_probe(probe));
  CHECK_FALSE(is_ddprun_probe(kTorchrun211));
  CHECK(tcpstore_ping_answer(probe) == tcpstore_pong(kDdprunProbeNonce));
  CHECK(tcpstore_ping(7) == "\x0d\x07\x00\x00\x00"s);
}

}  // namespace
}  // namespace ddprun::elastic
