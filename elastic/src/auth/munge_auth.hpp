// MUNGE as the rendezvous's key exchange under SLURM, so that `srun ddprun` is authenticated with
// no secret to set up. MUNGE (the credential service of every SLURM cluster) stamps a payload
// with the caller's uid and gid, encrypts it with the cluster's key, and lets only the uid named
// by the credential's restriction decode it, once (munged keeps a replay cache).
//
// The handshake of rendezvous_auth.hpp is unchanged but for where its secret K comes from:
//   client -> server  hello + "munge": cred(uid=U, to U; "client", SCOPE, Nc)
//   server            decodes it: the sender must be U (the server's own uid) and the payload
//                     must name SCOPE and the hello's nonce Nc; then picks K at random
//   server -> client  challenge + "munge": cred(uid=U, to U; "server", SCOPE, Nc, K)
//   client            decodes it: the sender must be U, the payload must name SCOPE and Nc;
//                     takes K. Both go on with K as the job's secret (HMAC proofs, then tags).
// SCOPE is the SLURM job id and the run id: nodes of another job, or of another run in the same
// job, are refused. A peer of another uid can neither make a credential of uid U nor read K; a
// squatter on the endpoint gets a hello it cannot use and cannot answer it. The binding to Nc
// makes an old credential useless on a new connection. Root on a node (who holds MUNGE's key)
// is trusted, as SLURM trusts it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "auth/rendezvous_auth.hpp"

namespace ddprun::elastic {

// MUNGE cannot be used: libmunge or munged is missing, or munged refused a request. An
// AuthError: during a handshake it refuses the peer like any other failed proof.
class MungeError : public AuthError {
 public:
  using AuthError::AuthError;
};

// What a decoded credential says.
struct MungeCredential {
  std::string payload;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The credential service: libmunge (open_munge) or a fake in tests.
class CredentialService {
 public:
  virtual ~CredentialService() = default;
  // A credential carrying `payload`, encrypted, that only `decoder_uid` may decode. Throws
  // MungeError.
  virtual std::string encode(std::string_view payload, uid_t decoder_uid) = 0;
  // Decodes a credential; throws MungeError when it is invalid, expired, replayed, or not for
  // this uid.
  virtual MungeCredential decode(const std::string& credential) = 0;
};

// libmunge, loaded with dlopen("libmunge.so.2") so that ddprun runs where it is absent. `socket`:
// munged's socket; empty: libmunge's default. Checks that munged answers (one encode). Throws
// MungeError saying why it cannot be used.
std::unique_ptr<CredentialService> open_munge(const std::string& socket);

// munged's socket named by slurm.conf's AuthInfo (`AuthInfo=socket=PATH[,...]`, or an old-style
// bare path), as SLURM's own tools use it; empty when slurm.conf names none.
std::string munge_socket_from_slurm_conf(std::string_view slurm_conf_text);

// One side of the exchange above, for one node's process (uid = getuid() outside tests).
class MungeKeyExchange {
 public:
  MungeKeyExchange(std::shared_ptr<CredentialService> service, std::string scope, uid_t uid);

  // Client: the credential its hello carries.
  std::string client_credential(std::string_view client_nonce);
  // Server: checks the hello's credential (throws AuthError when it is not this job's user and
  // scope, or not for `client_nonce`); returns the connection's secret K and the credential that
  // carries it to the client.
  struct Grant {
    std::string secret;
    std::string credential;
  };
  Grant grant(const std::string& client_credential, std::string_view client_nonce);
  // Client: checks the challenge's credential; returns K. Throws AuthError.
  std::string accept(const std::string& server_credential, std::string_view client_nonce);

  const std::string& scope() const { return scope_; }

 private:
  MungeCredential decode(const std::string& credential, const char* whose);

  std::shared_ptr<CredentialService> service_;
  std::string scope_;
  uid_t uid_;
};

// How one node authenticates its rendezvous connections: with the job's secret, with MUNGE
// (the secret is then made per connection by the host), or not at all.
struct NodeAuth {
  std::string secret;
  std::shared_ptr<MungeKeyExchange> munge;
  bool required() const { return !secret.empty() || munge != nullptr; }
};

}  // namespace ddprun::elastic
