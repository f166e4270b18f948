#include "auth/munge_auth.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ddprun/text.hpp"
#include "ddprun/rendezvous_config.hpp"
#include "auth/rendezvous_auth.hpp"

#if DDPRUN_HAVE_MUNGE_H
#include <munge.h>
#endif

namespace ddprun::elastic {

namespace {

constexpr std::string_view kClientLabel = "ddprun-rdzv munge client";
constexpr std::string_view kServerLabel = "ddprun-rdzv munge server";

#if DDPRUN_HAVE_MUNGE_H

// libmunge's functions, resolved from the library munged's own package installs. The prototypes
// come from munge.h, so a changed ABI fails to compile rather than to run.
struct MungeLibrary {
  void* handle = nullptr;
  decltype(&munge_ctx_create) ctx_create = nullptr;
  decltype(&munge_ctx_destroy) ctx_destroy = nullptr;
  decltype(&munge_ctx_set) ctx_set = nullptr;
  decltype(&munge_ctx_strerror) ctx_strerror = nullptr;
  decltype(&munge_encode) encode = nullptr;
  decltype(&munge_decode) decode = nullptr;
  decltype(&munge_strerror) strerror = nullptr;

  MungeLibrary() {
    handle = ::dlopen("libmunge.so.2", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) throw MungeError(fmt::format("libmunge is not installed ({})", ::dlerror()));
    resolve(ctx_create, "munge_ctx_create");
    resolve(ctx_destroy, "munge_ctx_destroy");
    resolve(ctx_set, "munge_ctx_set");
    resolve(ctx_strerror, "munge_ctx_strerror");
    resolve(encode, "munge_encode");
    resolve(decode, "munge_decode");
    resolve(strerror, "munge_strerror");
  }
  MungeLibrary(const MungeLibrary&) = delete;
  MungeLibrary& operator=(const MungeLibrary&) = delete;
  ~MungeLibrary() { ::dlclose(handle); }

  template <typename F>
  void resolve(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(handle, name));
    if (f == nullptr) throw MungeError(fmt::format("libmunge.so.2 has no {}", name));
  }
};

// One munge context per call: contexts hold per-call state (the last error, the restriction).
class LibMunge final : public CredentialService {
 public:
  explicit LibMunge(std::string socket) : socket_(std::move(socket)) {}

  std::string encode(std::string_view payload, uid_t decoder_uid) override {
    Context ctx(lib_, socket_);
    check(ctx, lib_.ctx_set(ctx.get(), MUNGE_OPT_UID_RESTRICTION, decoder_uid), "restrict a credential");
    // Encrypted whatever munged's default: the server's credential carries the connection's key.
    check(ctx, lib_.ctx_set(ctx.get(), MUNGE_OPT_CIPHER_TYPE, MUNGE_CIPHER_AES128), "choose a cipher");
    char* credential = nullptr;
    check(ctx, lib_.encode(&credential, ctx.get(), payload.data(), static_cast<int>(payload.size())),
          "encode a credential");
    std::string out(credential);
    std::free(credential);
    return out;
  }

  MungeCredential decode(const std::string& credential) override {
    Context ctx(lib_, socket_);
    void* payload = nullptr;
    int size = 0;
    MungeCredential out;
    const munge_err_t e = lib_.decode(credential.c_str(), ctx.get(), &payload, &size, &out.uid, &out.gid);
    if (payload != nullptr) {
      if (e == EMUNGE_SUCCESS) out.payload.assign(static_cast<const char*>(payload), static_cast<std::size_t>(size));
      std::free(payload);
    }
    check(ctx, e, "decode a credential");
    return out;
  }

 private:
  class Context {
   public:
    Context(MungeLibrary& lib, const std::string& socket) : lib_(lib), ctx_(lib.ctx_create()) {
      if (ctx_ == nullptr) throw MungeError("libmunge could not make a context (out of memory)");
      if (!socket.empty() && lib_.ctx_set(ctx_, MUNGE_OPT_SOCKET, socket.c_str()) != EMUNGE_SUCCESS) {
        lib_.ctx_destroy(ctx_);
        throw MungeError(fmt::format("libmunge refused the socket {}", socket));
      }
    }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context() { lib_.ctx_destroy(ctx_); }
    munge_ctx_t get() const { return ctx_; }

   private:
    MungeLibrary& lib_;
    munge_ctx_t ctx_;
  };

  void check(const Context& ctx, munge_err_t e, const char* what) {
    if (e == EMUNGE_SUCCESS) return;
    const char* detail = lib_.ctx_strerror(ctx.get());
    throw MungeError(fmt::format("munge could not {}: {}", what, detail != nullptr ? detail : lib_.strerror(e)));
  }

  MungeLibrary lib_;
  std::string socket_;
};

#endif  // DDPRUN_HAVE_MUNGE_H

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<CredentialService> open_munge(const std::string& socket) {
#if DDPRUN_HAVE_MUNGE_H
  auto service = std::make_unique<LibMunge>(socket);
  // munged answers, and with the same key as it decodes with: a round trip to this uid.
  const uid_t uid = ::getuid();
  const MungeCredential probe = service->decode(service->encode("ddprun probe", uid));
  if (probe.payload != "ddprun probe" || probe.uid != uid) throw MungeError("munged returned another payload");
  return service;
#else
  (void)socket;
  throw MungeError("this ddprun was built without MUNGE support (libmunge-dev was missing)");
#endif
}

std::string munge_socket_from_slurm_conf(std::string_view text) {
  std::string found;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::string_view l = line;
    l = trim(l.substr(0, l.find('#')), " \t\r");
    const auto eq = l.find('=');
    if (eq == std::string_view::npos || !iequals(trim(l.substr(0, eq), " \t\r"), "AuthInfo")) continue;
    const std::string_view value = trim(l.substr(eq + 1), " \t\r");
    if (!value.empty() && value.front() == '/') {  // SLURM before 15.08: the socket's path alone
      found = value;
      continue;
    }
    std::string_view rest = value;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view item = trim(rest.substr(0, comma), " \t\r");
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      const auto item_eq = item.find('=');
      if (item_eq != std::string_view::npos && iequals(trim(item.substr(0, item_eq), " \t\r"), "socket")) {
        found = trim(item.substr(item_eq + 1), " \t\r");
      }
    }
  }
  return found;
}

MungeKeyExchange::MungeKeyExchange(std::shared_ptr<CredentialService> service, std::string scope, uid_t uid)
    : service_(std::move(service)), scope_(std::move(scope)), uid_(uid) {}

std::string MungeKeyExchange::client_credential(std::string_view client_nonce) {
  return service_->encode(length_prefixed({kClientLabel, scope_, client_nonce}), uid_);
}

MungeKeyExchange::Grant MungeKeyExchange::grant(const std::string& client_credential, std::string_view client_nonce) {
  const MungeCredential c = decode(client_credential, "its");
  if (c.payload != length_prefixed({kClientLabel, scope_, client_nonce})) {
    throw AuthError(fmt::format("its MUNGE credential is not for this job and run ({}) or not for this connection",
                                scope_));
  }
  Grant out;
  out.secret = random_nonce();
  out.credential = service_->encode(length_prefixed({kServerLabel, scope_, client_nonce, out.secret}), uid_);
  return out;
}

std::string MungeKeyExchange::accept(const std::string& server_credential, std::string_view client_nonce) {
  const MungeCredential c = decode(server_credential, "the host's");
  // The key is the payload's last part: 64 hex digits, as random_nonce() makes it.
  const std::string key = c.payload.size() >= 64 ? c.payload.substr(c.payload.size() - 64) : std::string();
  if (!is_nonce(key) || c.payload != length_prefixed({kServerLabel, scope_, client_nonce, key})) {
    throw AuthError(fmt::format(
        "the host's MUNGE credential is not for this job and run ({}) or not for this connection", scope_));
  }
  return key;
}

MungeCredential MungeKeyExchange::decode(const std::string& credential, const char* whose) {
  MungeCredential c;
  try {
    c = service_->decode(credential);
  } catch (const MungeError& e) {
    throw AuthError(fmt::format("{} MUNGE credential was refused: {}", whose, e.what()));
  }
  if (c.uid != uid_) {
    throw AuthError(fmt::format("{} MUNGE credential is of uid {}, and this job runs as uid {}", whose, c.uid, uid_));
  }
  return c;
}

}  // namespace ddprun::elastic
