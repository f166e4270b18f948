#include "auth/rendezvous_auth.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <type_traits>

namespace ddprun::elastic {

namespace {

// OpenSSL's EVP_MD, which we only pass from EVP_sha256() to HMAC(); its cipher types, which we
// only pass between its functions.
struct evp_md_st;
struct evp_cipher_st;
struct evp_cipher_ctx_st;
struct engine_st;

// OpenSSL's libcrypto, opened the first time a run needs it (a job's secret, MUNGE's session
// key). Linked, it was loaded by every start of ddprun: 1.6 ms of a `ddprun --version`
// (scripts/bench/startup.py). Only the functions below are used; their C signatures are
// the same in OpenSSL 1.1 and 3, so they are declared here rather than taken from a version's
// headers, and either library serves: 3 where it is (Debian 12, RHEL 9, Ubuntu 22.04), else 1.1
// (RHEL 8, Ubuntu 20.04), the platforms of the pip wheel (docs/install.md).
struct Crypto {
  unsigned char* (*hmac)(const evp_md_st* md, const void* key, int key_len, const unsigned char* data,
                         size_t data_len, unsigned char* md_out, unsigned int* md_len) = nullptr;
  const evp_md_st* (*sha256)() = nullptr;
  int (*rand_bytes)(unsigned char* buf, int num) = nullptr;
  int (*memcmp)(const void* a, const void* b, size_t len) = nullptr;
  // AES-256-GCM (ChunkCipher).
  const evp_cipher_st* (*aes_256_gcm)() = nullptr;
  evp_cipher_ctx_st* (*ctx_new)() = nullptr;
  void (*ctx_free)(evp_cipher_ctx_st* ctx) = nullptr;
  int (*ctx_ctrl)(evp_cipher_ctx_st* ctx, int type, int arg, void* ptr) = nullptr;
  int (*encrypt_init)(evp_cipher_ctx_st* ctx, const evp_cipher_st* cipher, engine_st* engine, const unsigned char* key,
                      const unsigned char* iv) = nullptr;
  int (*encrypt_update)(evp_cipher_ctx_st* ctx, unsigned char* out, int* out_len, const unsigned char* in,
                        int in_len) = nullptr;
  int (*encrypt_final)(evp_cipher_ctx_st* ctx, unsigned char* out, int* out_len) = nullptr;
  int (*decrypt_init)(evp_cipher_ctx_st* ctx, const evp_cipher_st* cipher, engine_st* engine, const unsigned char* key,
                      const unsigned char* iv) = nullptr;
  int (*decrypt_update)(evp_cipher_ctx_st* ctx, unsigned char* out, int* out_len, const unsigned char* in,
                        int in_len) = nullptr;
  int (*decrypt_final)(evp_cipher_ctx_st* ctx, unsigned char* out, int* out_len) = nullptr;
  std::string error;  // why it cannot be used; empty: loaded
};

// In the order tried.
constexpr std::array<const char*, 2> kLibcrypto = {"libcrypto.so.3", "libcrypto.so.1.1"};
constexpr std::size_t kMaxDigestBytes = 64;  // OpenSSL's EVP_MAX_MD_SIZE, in 1.1 and 3

Crypto open_crypto() {
  Crypto c;
  void* lib = nullptr;
  const char* soname = nullptr;
  for (const char* name : kLibcrypto) {
    lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      soname = name;
      break;
    }
    if (c.error.empty()) c.error = ::dlerror();  // the first one's reason: the one to install
  }
  if (lib == nullptr) return c;
  c.error.clear();
  const auto symbol = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(::dlsym(lib, name));
    if (function == nullptr && c.error.empty()) c.error = std::string(soname) + " has no " + name;
  };
  symbol(c.hmac, "HMAC");
  symbol(c.sha256, "EVP_sha256");
  symbol(c.rand_bytes, "RAND_bytes");
  symbol(c.memcmp, "CRYPTO_memcmp");
  symbol(c.aes_256_gcm, "EVP_aes_256_gcm");
  symbol(c.ctx_new, "EVP_CIPHER_CTX_new");
  symbol(c.ctx_free, "EVP_CIPHER_CTX_free");
  symbol(c.ctx_ctrl, "EVP_CIPHER_CTX_ctrl");
  symbol(c.encrypt_init, "EVP_EncryptInit_ex");
  symbol(c.encrypt_update, "EVP_EncryptUpdate");
  symbol(c.encrypt_final, "EVP_EncryptFinal_ex");
  symbol(c.decrypt_init, "EVP_DecryptInit_ex");
  symbol(c.decrypt_update, "EVP_DecryptUpdate");
  symbol(c.decrypt_final, "EVP_DecryptFinal_ex");
  return c;  // the library stays open: ddprun uses it until it exits
}

// Opened once, by the first caller; thread-safe.
const Crypto& opened() {
  static const Crypto lib = open_crypto();
  return lib;
}

// Throws std::runtime_error when libcrypto cannot be loaded.
const Crypto& crypto() {
  if (const std::string problem = load_libcrypto(); !problem.empty()) throw std::runtime_error(problem);
  return opened();
}

constexpr std::size_t kNonceBytes = 32;
constexpr std::string_view kHex = "0123456789abcdef";

std::string to_hex(const unsigned char* data, std::size_t size) {
  std::string out;
  out.reserve(2 * size);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kHex[data[i] >> 4]);
    out.push_back(kHex[data[i] & 0xf]);
  }
  return out;
}

bool is_nonce_value(const nlohmann::json& value) {
  return value.is_string() && is_nonce(value.get_ref<const std::string&>());
}

std::string field(const nlohmann::json& message, const char* type, const char* name) {
  if (!message.is_object() || message.value("type", "") != type || !message.contains(name) ||
      !message[name].is_string()) {
    throw AuthError(std::string("expected a '") + type + "' message with a \"" + name + "\"");
  }
  return message[name];
}

}  // namespace

std::string load_libcrypto() {
  const std::string& error = opened().error;
  if (error.empty()) return {};
  return "the rendezvous's authentication needs OpenSSL's libcrypto.so.3 or libcrypto.so.1.1, neither of which could be "
         "loaded (" + error + "); install one (Debian: libssl3)";
}

std::string length_prefixed(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) {
    out += std::to_string(p.size());
    out.push_back(':');
    out.append(p);
  }
  return out;
}

bool is_nonce(std::string_view text) {
  return text.size() == 2 * kNonceBytes && text.find_first_not_of(kHex) == std::string_view::npos;
}

std::string random_nonce() {
  std::array<unsigned char, kNonceBytes> bytes{};
  if (crypto().rand_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw std::runtime_error("OpenSSL's RAND_bytes could not make a nonce");
  }
  return to_hex(bytes.data(), bytes.size());
}

namespace {

// HMAC-SHA256's 32 bytes.
std::string hmac_sha256(std::string_view key, std::string_view data) {
  std::array<unsigned char, kMaxDigestBytes> digest{};
  unsigned int length = 0;
  const Crypto& c = crypto();
  if (c.hmac(c.sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
             data.size(), digest.data(), &length) == nullptr) {
    throw std::runtime_error("OpenSSL's HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(digest.data()), length);
}

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  const std::string digest = hmac_sha256(key, data);
  return to_hex(reinterpret_cast<const unsigned char*>(digest.data()), digest.size());
}

bool tags_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && crypto().memcmp(a.data(), b.data(), a.size()) == 0;
}

Handshake::Handshake(AuthRole role, std::string secret, std::string nonce, int version)
    : role_(role), secret_(std::move(secret)), own_nonce_(std::move(nonce)), version_(version) {
  (role_ == AuthRole::kClient ? client_nonce_ : server_nonce_) = own_nonce_;
}

void Handshake::set_secret(std::string secret) {
  if (step_ != 0) throw AuthError("the secret came after the handshake began");
  secret_ = std::move(secret);
}

std::string Handshake::proof(std::string_view label) const {
  return hmac_sha256_hex(secret_, length_prefixed({label, client_nonce_, server_nonce_}));
}

void Handshake::derive_session_key() {
  session_key_ = hmac_sha256_hex(secret_, length_prefixed({"ddprun-rdzv session", client_nonce_, server_nonce_}));
  done_ = true;
}

nlohmann::json Handshake::hello() const {
  if (role_ != AuthRole::kClient) throw AuthError("only a client says hello");
  return {{"type", "hello"}, {"version", version_}, {"nonce", own_nonce_}};
}

nlohmann::json Handshake::on_hello(const nlohmann::json& hello) {
  if (role_ != AuthRole::kServer || step_ != 0) throw AuthError("a hello out of turn");
  const std::string nonce = field(hello, "hello", "nonce");
  if (!is_nonce_value(hello["nonce"])) throw AuthError("a hello whose nonce is not 64 hex digits");
  if (!hello.contains("version") || !hello["version"].is_number_integer()) {
    throw AuthError("a hello without a version");
  }
  // The caller compares the version itself, unnarrowed (is_protocol_version).
  client_nonce_ = nonce;
  step_ = 1;
  return {{"type", "challenge"}, {"nonce", server_nonce_}, {"proof", proof("ddprun-rdzv server")}};
}

nlohmann::json Handshake::on_challenge(const nlohmann::json& challenge) {
  if (role_ != AuthRole::kClient || step_ != 0) throw AuthError("a challenge out of turn");
  const std::string theirs = field(challenge, "challenge", "proof");
  if (!is_nonce_value(challenge.value("nonce", nlohmann::json()))) {
    throw AuthError("a challenge whose nonce is not 64 hex digits");
  }
  server_nonce_ = challenge["nonce"];
  if (tags_equal(server_nonce_, client_nonce_)) throw AuthError("the challenge repeats this node's nonce");
  if (!tags_equal(theirs, proof("ddprun-rdzv server"))) {
    throw AuthError("its proof does not match the job's secret");
  }
  step_ = 1;
  derive_session_key();
  return {{"type", "proof"}, {"proof", proof("ddprun-rdzv client")}};
}

void Handshake::on_proof(const nlohmann::json& message) {
  if (role_ != AuthRole::kServer || step_ != 1) throw AuthError("a proof out of turn");
  if (!tags_equal(field(message, "proof", "proof"), proof("ddprun-rdzv client"))) {
    throw AuthError("its proof does not match the job's secret");
  }
  step_ = 2;
  derive_session_key();
}

const std::string& Handshake::session_key() const {
  if (!done_) throw AuthError("the handshake is not done");
  return session_key_;
}

MessageAuth::MessageAuth(AuthRole role, std::string session_key) : role_(role), key_(std::move(session_key)) {}

std::string MessageAuth::tag(std::string_view direction, unsigned long long seq, std::string_view json_text) const {
  return hmac_sha256_hex(key_, length_prefixed({direction, std::to_string(seq), json_text}));
}

std::string MessageAuth::seal(std::string_view json_text) {
  const std::string_view direction = role_ == AuthRole::kClient ? "client->server" : "server->client";
  return tag(direction, sent_++, json_text) + " " + std::string(json_text);
}

std::string_view MessageAuth::open(std::string_view line) {
  const std::string_view direction = role_ == AuthRole::kClient ? "server->client" : "client->server";
  const auto space = line.find(' ');
  if (space == std::string_view::npos) throw AuthError("a message without an authentication tag");
  const std::string_view json_text = line.substr(space + 1);
  if (!tags_equal(line.substr(0, space), tag(direction, received_, json_text))) {
    throw AuthError("a message whose authentication tag is wrong (altered, replayed or forged)");
  }
  ++received_;
  return json_text;
}

namespace {

// OpenSSL's EVP_CTRL_GCM_GET_TAG and EVP_CTRL_GCM_SET_TAG, the same in 1.1 and 3; GCM's default
// IV is 12 bytes.
constexpr int kGcmGetTag = 0x10;
constexpr int kGcmSetTag = 0x11;
constexpr std::size_t kGcmIvBytes = 12;

// A cipher context, freed however the function ends.
class CipherContext {
 public:
  CipherContext() : ctx_(crypto().ctx_new()) {
    if (ctx_ == nullptr) throw std::runtime_error("OpenSSL could not make a cipher context (out of memory)");
  }
  CipherContext(const CipherContext&) = delete;
  CipherContext& operator=(const CipherContext&) = delete;
  ~CipherContext() { opened().ctx_free(ctx_); }
  evp_cipher_ctx_st* get() const { return ctx_; }

 private:
  evp_cipher_ctx_st* ctx_;
};

}  // namespace

ChunkCipher::ChunkCipher(std::string_view session_key, std::string_view direction)
    : key_(hmac_sha256(session_key, length_prefixed({"ddprun-replica chunk key", direction}))) {}

std::array<unsigned char, 12> ChunkCipher::iv(unsigned long long counter) {
  std::array<unsigned char, kGcmIvBytes> out{};
  for (std::size_t i = 0; i < 8; ++i) out[kGcmIvBytes - 1 - i] = static_cast<unsigned char>(counter >> (8 * i));
  return out;
}

std::string ChunkCipher::seal(std::string& bytes) {
  const Crypto& c = crypto();
  CipherContext ctx;
  const auto nonce = iv(sent_);
  auto* data = reinterpret_cast<unsigned char*>(bytes.data());
  int n = 0;
  std::array<unsigned char, kTagBytes> tag{};
  if (c.encrypt_init(ctx.get(), c.aes_256_gcm(), nullptr, reinterpret_cast<const unsigned char*>(key_.data()),
                     nonce.data()) != 1 ||
      c.encrypt_update(ctx.get(), data, &n, data, static_cast<int>(bytes.size())) != 1 ||
      c.encrypt_final(ctx.get(), data + n, &n) != 1 ||
      c.ctx_ctrl(ctx.get(), kGcmGetTag, static_cast<int>(tag.size()), tag.data()) != 1) {
    throw std::runtime_error("OpenSSL's AES-256-GCM failed to encrypt");
  }
  ++sent_;
  return to_hex(tag.data(), tag.size());
}

void ChunkCipher::open(std::string& bytes, std::string_view tag_hex) {
  std::array<unsigned char, kTagBytes> tag{};
  if (tag_hex.size() != 2 * tag.size() || tag_hex.find_first_not_of(kHex) != std::string_view::npos) {
    throw AuthError("a chunk whose tag is not 32 hex digits");
  }
  for (std::size_t i = 0; i < tag.size(); ++i) {
    tag[i] = static_cast<unsigned char>(kHex.find(tag_hex[2 * i]) << 4 | kHex.find(tag_hex[2 * i + 1]));
  }
  const Crypto& c = crypto();
  CipherContext ctx;
  const auto nonce = iv(received_);
  auto* data = reinterpret_cast<unsigned char*>(bytes.data());
  int n = 0;
  if (c.decrypt_init(ctx.get(), c.aes_256_gcm(), nullptr, reinterpret_cast<const unsigned char*>(key_.data()),
                     nonce.data()) != 1 ||
      c.decrypt_update(ctx.get(), data, &n, data, static_cast<int>(bytes.size())) != 1 ||
      c.ctx_ctrl(ctx.get(), kGcmSetTag, static_cast<int>(tag.size()), tag.data()) != 1) {
    throw std::runtime_error("OpenSSL's AES-256-GCM failed to decrypt");
  }
  if (c.decrypt_final(ctx.get(), data + n, &n) != 1) {
    // What was decrypted is not the sender's: never let it be used.
    std::fill(bytes.begin(), bytes.end(), '\0');
    throw AuthError("a chunk whose tag is wrong (altered, replayed or forged)");
  }
  ++received_;
}

}  // namespace ddprun::elastic
