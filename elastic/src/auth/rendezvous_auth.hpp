// Authentication of rendezvous connections with the job's secret: a mutual HMAC-SHA256
// challenge-response with a fresh nonce from each side, then an HMAC on every message, bound to
// the session (a key derived from both nonces), the direction and a sequence number. Pure: no
// I/O; the nonces are passed in, so that tests can replay a handshake.
//
//   client -> server  {"type":"hello","version":V,"nonce":Nc}
//   server -> client  {"type":"challenge","nonce":Ns,"proof":HMAC(K, "ddprun-rdzv server" 0 Nc Ns)}
//   client -> server  {"type":"proof","proof":HMAC(K, "ddprun-rdzv client" 0 Nc Ns)}
// The client checks the server's proof before it proves itself, so that a program squatting on
// the endpoint learns nothing and is refused. Then each side sends lines "TAG JSON", TAG =
// HMAC(S, direction 0 seq 0 JSON) with S = HMAC(K, "ddprun-rdzv session" 0 Nc Ns) and seq
// counting that direction's messages from 0: a line altered, replayed, reordered, or taken from
// another connection fails. Messages are authenticated, not encrypted (nothing in them is secret);
// the snapshot copies' file bytes are encrypted too (ChunkCipher).
#pragma once

#include <nlohmann/json.hpp>
#include <array>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddprun::elastic {

// The peer failed to authenticate: a wrong proof, a malformed handshake message, a bad tag.
class AuthError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loads OpenSSL's libcrypto (once) for the functions below; "" when it could be, else one line
// saying why not and what to install.
std::string load_libcrypto();

// 32 random bytes from OpenSSL's RAND_bytes, as 64 lowercase hex digits. Throws
// std::runtime_error when the generator fails, or (as every function here that needs
// libcrypto) when neither libcrypto.so.3 nor libcrypto.so.1.1 can be loaded.
std::string random_nonce();

// Whether `text` is what random_nonce() makes.
bool is_nonce(std::string_view text);

// The parts as "SIZE:BYTES" one after another, so that no two different lists give the same
// bytes: what every HMAC and credential payload of the rendezvous is computed over.
std::string length_prefixed(std::initializer_list<std::string_view> parts);

// HMAC-SHA256 of `data` under `key`, as 64 lowercase hex digits.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

// Whether two tags are equal, in time independent of where they differ (CRYPTO_memcmp).
bool tags_equal(std::string_view a, std::string_view b);

enum class AuthRole { kClient, kServer };

// One side of the handshake above. A new Handshake per connection; methods out of order, or a
// wrong proof, throw AuthError.
class Handshake {
 public:
  // `nonce` must come from random_nonce() (tests pass fixed ones).
  Handshake(AuthRole role, std::string secret, std::string nonce, int version);

  // The secret, where it is only known during the handshake (MUNGE, munge_auth.hpp): before
  // on_hello (server) or on_challenge (client). Throws AuthError later.
  void set_secret(std::string secret);

  // Client: the first message.
  nlohmann::json hello() const;
  // Server: answers a hello with the challenge, which carries the server's proof.
  nlohmann::json on_hello(const nlohmann::json& hello);
  // Client: checks the server's proof; returns the client's proof. Done afterwards.
  nlohmann::json on_challenge(const nlohmann::json& challenge);
  // Server: checks the client's proof. Done afterwards.
  void on_proof(const nlohmann::json& proof);

  bool done() const { return done_; }
  // The session key; only once done().
  const std::string& session_key() const;

 private:
  std::string proof(std::string_view label) const;
  void derive_session_key();

  AuthRole role_;
  std::string secret_;
  std::string own_nonce_;
  std::string client_nonce_;
  std::string server_nonce_;
  int version_;
  int step_ = 0;
  bool done_ = false;
  std::string session_key_;
};

// The tags of one authenticated connection, for one side of it.
class MessageAuth {
 public:
  MessageAuth(AuthRole role, std::string session_key);
  // The line to send for `json_text` (no newline): "TAG JSON". Advances the send sequence.
  std::string seal(std::string_view json_text);
  // The JSON text of a received line when its tag is right for the next receive sequence
  // number (which then advances); throws AuthError otherwise.
  std::string_view open(std::string_view line);

 private:
  std::string tag(std::string_view direction, unsigned long long seq, std::string_view json_text) const;

  AuthRole role_;
  std::string key_;
  unsigned long long sent_ = 0;
  unsigned long long received_ = 0;
};

// AES-256-GCM over the chunks of file bytes sent one way on one connection (replica/link.hpp),
// so that a stranger on the network reads nothing of them: the key is HMAC(S, "ddprun-replica
// chunk key" 0 direction) with S the session key, the IV the number of chunks sealed before (so
// never reused under one key: S is new for every connection), the 16-byte tag sent beside the
// chunk. A chunk altered, forged, replayed or reordered fails to open.
class ChunkCipher {
 public:
  static constexpr std::size_t kTagBytes = 16;

  // `direction`: "client->server" or "server->client"; the two sides of a direction must agree.
  ChunkCipher(std::string_view session_key, std::string_view direction);
  // Encrypts `bytes` in place; returns the tag as 32 hex digits. The next chunk's IV follows.
  std::string seal(std::string& bytes);
  // Decrypts `bytes` in place when `tag` is right for the next chunk of this direction; throws
  // AuthError (the bytes zeroed) otherwise.
  void open(std::string& bytes, std::string_view tag);

 private:
  static std::array<unsigned char, 12> iv(unsigned long long counter);

  std::string key_;  // 32 bytes
  unsigned long long sent_ = 0;
  unsigned long long received_ = 0;
};

}  // namespace ddprun::elastic
