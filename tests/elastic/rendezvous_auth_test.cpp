// The authenticated rendezvous's pure parts: the handshake state machine and the message tags,
// with fixed nonces, and the settings that come with them.
#include "auth/rendezvous_auth.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "ddprun/rendezvous_config.hpp"

namespace ddprun::elastic {
namespace {

const std::string kClientNonce(64, 'a');
const std::string kServerNonce(64, 'b');
constexpr int kVersion = 5;

struct Pair {
  Handshake client;
  Handshake server;
};

Pair pair(const std::string& client_secret, const std::string& server_secret) {
  return {Handshake(AuthRole::kClient, client_secret, kClientNonce, kVersion),
          Handshake(AuthRole::kServer, server_secret, kServerNonce, kVersion)};
}

TEST_CASE("HMAC-SHA256 is OpenSSL's (RFC 4231 test case 2) and tags compare in full") {
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(tags_equal("abc", "abc"));
  CHECK_FALSE(tags_equal("abc", "abd"));
  CHECK_FALSE(tags_equal("abc", "ab"));
  CHECK_FALSE(tags_equal("", "a"));
  const std::string a = random_nonce(), b = random_nonce();
  CHECK(a.size() == 64);
  CHECK(a != b);
}

TEST_CASE("the same secret on both sides: each proves itself, both get the same session key") {
  Pair p = pair("s3cret", "s3cret");
  const nlohmann::json hello = p.client.hello();
  CHECK(hello["type"] == "hello");
  CHECK(hello["version"] == kVersion);
  CHECK(hello.dump().find("s3cret") == std::string::npos);
  const nlohmann::json challenge = p.server.on_hello(hello);
  CHECK_FALSE(p.server.done());
  const nlohmann::json proof = p.client.on_challenge(challenge);
  CHECK(p.client.done());
  CHECK_FALSE(p.server.done());
  p.server.on_proof(proof);
  CHECK(p.server.done());
  CHECK(p.client.session_key() == p.server.session_key());
  CHECK(p.client.session_key() != hmac_sha256_hex("s3cret", ""));  // bound to the nonces
  CHECK(challenge["proof"] != proof["proof"]);  // a server's proof is never a client's
}

TEST_CASE("a wrong secret is refused on whichever side checks it") {
  SUBCASE("a stranger: the server refuses its proof") {
    Pair p = pair("guess", "s3cret");
    const nlohmann::json challenge = p.server.on_hello(p.client.hello());
    // The stranger cannot check the server's proof either: it fails on its side first.
    CHECK_THROWS_AS(p.client.on_challenge(challenge), AuthError);
    Handshake liar(AuthRole::kClient, "guess", kClientNonce, kVersion);
    nlohmann::json forged = {{"type", "proof"}, {"proof", hmac_sha256_hex("guess", "anything")}};
    CHECK_THROWS_WITH_AS(p.server.on_proof(forged), "its proof does not match the job's secret", AuthError);
    CHECK_FALSE(p.server.done());
    CHECK_THROWS_AS(p.server.session_key(), AuthError);
  }
  SUBCASE("a squatter on the endpoint: the client refuses its challenge and proves nothing") {
    Pair p = pair("s3cret", "squatter");
    CHECK_THROWS_WITH_AS(p.client.on_challenge(p.server.on_hello(p.client.hello())),
                         "its proof does not match the job's secret", AuthError);
    CHECK_FALSE(p.client.done());
  }
  SUBCASE("a server's own proof sent back as the client's (reflection)") {
    Pair p = pair("s3cret", "s3cret");
    const nlohmann::json challenge = p.server.on_hello(p.client.hello());
    CHECK_THROWS_AS(p.server.on_proof({{"type", "proof"}, {"proof", challenge["proof"]}}), AuthError);
  }
  SUBCASE("a proof recorded from another session (replay)") {
    Pair first = pair("s3cret", "s3cret");
    const nlohmann::json recorded = first.client.on_challenge(first.server.on_hello(first.client.hello()));
    Handshake server(AuthRole::kServer, "s3cret", std::string(64, 'c'), kVersion);
    server.on_hello(first.client.hello());
    CHECK_THROWS_AS(server.on_proof(recorded), AuthError);
  }
  SUBCASE("a challenge that echoes the client's nonce") {
    Pair p = pair("s3cret", "s3cret");
    Handshake mirror(AuthRole::kServer, "s3cret", kClientNonce, kVersion);
    CHECK_THROWS_AS(p.client.on_challenge(mirror.on_hello(p.client.hello())), AuthError);
  }
}

TEST_CASE("malformed or out-of-turn handshake messages are refused") {
  Pair p = pair("s3cret", "s3cret");
  CHECK_THROWS_AS(p.server.on_proof({{"type", "proof"}, {"proof", "00"}}), AuthError);  // before a hello
  CHECK_THROWS_AS(p.server.on_hello({{"type", "hello"}, {"version", kVersion}, {"nonce", "short"}}), AuthError);
  CHECK_THROWS_AS(p.server.on_hello({{"type", "hello"}, {"version", kVersion}, {"nonce", std::string(64, 'Z')}}),
                  AuthError);
  CHECK_THROWS_AS(p.server.on_hello({{"type", "join"}}), AuthError);
  CHECK_THROWS_AS(p.server.on_hello({{"type", "hello"}, {"nonce", kClientNonce}}), AuthError);  // no version
  CHECK_THROWS_AS(p.client.on_challenge({{"type", "challenge"}, {"proof", "00"}}), AuthError);  // no nonce
  CHECK_THROWS_AS(p.server.hello(), AuthError);
  p.server.on_hello(p.client.hello());
  CHECK_THROWS_AS(p.server.on_hello(p.client.hello()), AuthError);  // a second hello
}

TEST_CASE("every message is tagged for its session, direction and place in the sequence") {
  Pair p = pair("s3cret", "s3cret");
  p.server.on_proof(p.client.on_challenge(p.server.on_hello(p.client.hello())));
  MessageAuth client(AuthRole::kClient, p.client.session_key());
  MessageAuth server(AuthRole::kServer, p.server.session_key());

  const std::string first = client.seal(R"({"type":"join"})");
  const std::string second = client.seal(R"({"type":"heartbeat"})");
  CHECK(first.substr(65) == R"({"type":"join"})");

  SUBCASE("in order: accepted") {
    CHECK(server.open(first) == R"({"type":"join"})");
    CHECK(server.open(second) == R"({"type":"heartbeat"})");
    CHECK(client.open(server.seal(R"({"type":"assign"})")) == R"({"type":"assign"})");
  }
  SUBCASE("altered") {
    std::string forged = first;
    forged.replace(65, std::string::npos, R"({"type":"leave"})");
    CHECK_THROWS_AS(server.open(forged), AuthError);
  }
  SUBCASE("replayed") {
    server.open(first);
    CHECK_THROWS_AS(server.open(first), AuthError);
  }
  SUBCASE("reordered") { CHECK_THROWS_AS(server.open(second), AuthError); }
  SUBCASE("reflected back to its sender") { CHECK_THROWS_AS(client.open(first), AuthError); }
  SUBCASE("from another connection of the same job") {
    Handshake other_client(AuthRole::kClient, "s3cret", std::string(64, 'd'), kVersion);
    Handshake other_server(AuthRole::kServer, "s3cret", std::string(64, 'e'), kVersion);
    other_server.on_proof(other_client.on_challenge(other_server.on_hello(other_client.hello())));
    MessageAuth other(AuthRole::kClient, other_client.session_key());
    CHECK_THROWS_AS(server.open(other.seal(R"({"type":"join"})")), AuthError);
  }
  SUBCASE("untagged") { CHECK_THROWS_AS(server.open(R"({"type":"join"})"), AuthError); }
}

TEST_CASE("the secret comes from secret_file, else DDPRUN_RDZV_SECRET; the new keys parse") {
  RendezvousConfig c;
  apply_rdzv_conf("auth_timeout=2,max_connections=7,max_membership_changes=3", c);
  CHECK(c.timeouts.auth_timeout == 2);
  CHECK(c.max_connections == 7);
  CHECK(c.max_membership_changes == 3);
  CHECK_THROWS_AS(apply_rdzv_conf("max_connections=-1", c), RendezvousConfigError);
  CHECK_THROWS_AS(apply_rdzv_conf("secret_file=", c), RendezvousConfigError);

  RendezvousConfig from_env;
  load_secret(from_env, "env-secret");
  CHECK(from_env.secret == "env-secret");
  RendezvousConfig none;
  load_secret(none, nullptr);
  CHECK(none.secret.empty());
  CHECK_THROWS_AS(load_secret(none, ""), RendezvousConfigError);

  char path[] = "/tmp/ddprun-secret-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << "file-secret\n";
  RendezvousConfig from_file;
  apply_rdzv_conf(std::string("secret_file=") + path, from_file);
  load_secret(from_file, "env-secret");  // the file wins
  CHECK(from_file.secret == "file-secret");
  std::ofstream(path) << "\n";
  CHECK_THROWS_WITH_AS(load_secret(from_file, nullptr),
                       doctest::Contains("the file is empty"), RendezvousConfigError);
  std::ofstream(path) << std::string(64 * 1024 + 1, 'x');
  CHECK_THROWS_WITH_AS(load_secret(from_file, nullptr), doctest::Contains("a regular file of at most 65536 bytes"),
                       RendezvousConfigError);
  std::remove(path);
  CHECK_THROWS_WITH_AS(load_secret(from_file, nullptr), doctest::Contains("cannot read it"), RendezvousConfigError);
  // Neither a device that never ends nor a folder is read.
  for (const char* not_a_file : {"/dev/zero", "/tmp"}) {
    RendezvousConfig odd;
    odd.secret_file = not_a_file;
    CHECK_THROWS_WITH_AS(load_secret(odd, nullptr), doctest::Contains("expected a regular file"),
                         RendezvousConfigError);
  }
}

TEST_CASE("the host keeps at most a quarter of the descriptor limit for rendezvous connections") {
  RendezvousConfig c;
  c.max_nodes = 2;
  CHECK(connection_limit(c, 1024) == 20);
  CHECK(connection_limit(c, 64) == 16);
  CHECK(connection_limit(c, 8) == 4);
  c.max_connections = 100;
  CHECK(connection_limit(c, 64) == 100);  // given: as given
}

TEST_CASE("chunk cipher: the bytes encrypted, opened only in order, on their connection and direction") {
  const std::string session(64, 'a');
  const std::string plain = "model weights: " + std::string(1000, 'w');
  ChunkCipher sender(session, "client->server"), receiver(session, "client->server");
  std::string first = plain, second = plain;
  const std::string tag1 = sender.seal(first), tag2 = sender.seal(second);
  CHECK(tag1.size() == 2 * ChunkCipher::kTagBytes);
  CHECK(first.size() == plain.size());
  CHECK(first.find("model weights") == std::string::npos);  // a stranger on the wire reads nothing
  CHECK(first != second);                                      // a new IV for every chunk
  SUBCASE("in order: both open") {
    std::string a = first, b = second;
    receiver.open(a, tag1);
    receiver.open(b, tag2);
    CHECK(a == plain);
    CHECK(b == plain);
  }
  SUBCASE("a byte altered: refused, nothing of it kept") {
    std::string a = first;
    a[3] ^= 1;
    CHECK_THROWS_AS(receiver.open(a, tag1), AuthError);
    CHECK(a == std::string(a.size(), '\0'));
  }
  SUBCASE("reordered or replayed: refused") {
    std::string b = second;
    CHECK_THROWS_AS(receiver.open(b, tag2), AuthError);
    std::string a = first, again = first;
    receiver.open(a, tag1);
    CHECK_THROWS_AS(receiver.open(again, tag1), AuthError);
  }
  SUBCASE("the other direction, or another connection's key: refused") {
    ChunkCipher back(session, "server->client"), other(std::string(64, 'b'), "client->server");
    std::string a = first, b = first;
    CHECK_THROWS_AS(back.open(a, tag1), AuthError);
    CHECK_THROWS_AS(other.open(b, tag1), AuthError);
  }
  SUBCASE("a tag that is not 32 hex digits") {
    std::string a = first;
    CHECK_THROWS_AS(receiver.open(a, "xyz"), AuthError);
    CHECK_THROWS_AS(receiver.open(a, std::string(32, 'g')), AuthError);
  }
}

}  // namespace
}  // namespace ddprun::elastic
