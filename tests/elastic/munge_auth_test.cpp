// The MUNGE key exchange's rules (munge_auth.hpp) against a credential service that behaves as
// munged does for what the exchange relies on: the sender's uid is stamped, only the named uid
// decodes, a credential decodes once. Then the whole handshake with the secret it hands out,
// and what slurm.conf's AuthInfo names as munged's socket.
#include "auth/munge_auth.hpp"

#include <doctest/doctest.h>

#include <map>
#include <string>

#include "ddprun/rendezvous_config.hpp"
#include "auth/rendezvous_auth.hpp"
#include "fake_munge.hpp"

namespace ddprun::elastic {
namespace {

const std::string kNonce(64, 'c');
const std::string kOtherNonce(64, 'd');
constexpr char kScope[] = "SLURM job 42, run 42.0";

struct Nodes {
  std::shared_ptr<FakeMunge> munge = std::make_shared<FakeMunge>();
  MungeKeyExchange client{munge, kScope, 1000};
  MungeKeyExchange server{munge, kScope, 1000};
};

TEST_CASE("MUNGE key exchange: the client learns the secret the host picked, and the handshake completes") {
  Nodes n;
  const auto grant = n.server.grant(n.client.client_credential(kNonce), kNonce);
  CHECK(is_nonce(grant.secret));
  const std::string secret = n.client.accept(grant.credential, kNonce);
  CHECK(secret == grant.secret);

  Handshake client(AuthRole::kClient, "", kNonce, 5);
  Handshake server(AuthRole::kServer, "", std::string(64, 'e'), 5);
  server.set_secret(grant.secret);
  const auto challenge = server.on_hello(client.hello());
  client.set_secret(secret);
  server.on_proof(client.on_challenge(challenge));
  CHECK(client.session_key() == server.session_key());
  CHECK_THROWS_AS(client.set_secret("late"), AuthError);
}

TEST_CASE("MUNGE key exchange: the host refuses a credential of another user, job, run or connection") {
  Nodes n;
  SUBCASE("another uid: a stranger's credential names its own uid") {
    n.munge->caller = 2000;
    MungeKeyExchange stranger(n.munge, kScope, 1000);  // restricted to the job's uid, made by uid 2000
    const std::string credential = stranger.client_credential(kNonce);
    n.munge->caller = 1000;
    CHECK_THROWS_WITH_AS(n.server.grant(credential, kNonce), doctest::Contains("of uid 2000"), AuthError);
  }
  SUBCASE("another job or run") {
    MungeKeyExchange other(n.munge, "SLURM job 43, run 43.0", 1000);
    CHECK_THROWS_WITH_AS(n.server.grant(other.client_credential(kNonce), kNonce),
                         doctest::Contains("not for this job and run"), AuthError);
  }
  SUBCASE("made for another connection's nonce") {
    CHECK_THROWS_AS(n.server.grant(n.client.client_credential(kOtherNonce), kNonce), AuthError);
  }
  SUBCASE("replayed") {
    const std::string credential = n.client.client_credential(kNonce);
    n.server.grant(credential, kNonce);
    CHECK_THROWS_WITH_AS(n.server.grant(credential, kNonce), doctest::Contains("Replayed"), AuthError);
  }
  SUBCASE("the host's own credential sent back as a client's") {
    const auto grant = n.server.grant(n.client.client_credential(kNonce), kNonce);
    CHECK_THROWS_AS(n.server.grant(grant.credential, kNonce), AuthError);
  }
  SUBCASE("not a credential") {
    CHECK_THROWS_WITH_AS(n.server.grant("garbage", kNonce), doctest::Contains("refused"), AuthError);
  }
}

TEST_CASE("MUNGE key exchange: the client refuses a host of another user, job or connection") {
  Nodes n;
  SUBCASE("a squatter of another uid cannot make the host's credential") {
    n.munge->caller = 2000;
    MungeKeyExchange squatter(n.munge, kScope, 1000);
    n.munge->caller = 1000;
    const std::string hello_credential = n.client.client_credential(kNonce);
    n.munge->caller = 2000;
    // It cannot read the client's credential (restricted to uid 1000)...
    CHECK_THROWS_AS(squatter.grant(hello_credential, kNonce), AuthError);
    // ...and what it makes is stamped with its own uid.
    const std::string forged = n.munge->encode(length_prefixed({"ddprun-rdzv munge server", kScope, kNonce,
                                                                std::string(64, 'f')}),
                                               1000);
    n.munge->caller = 1000;
    CHECK_THROWS_WITH_AS(n.client.accept(forged, kNonce), doctest::Contains("of uid 2000"), AuthError);
  }
  SUBCASE("a credential of this user for another connection") {
    const auto grant = n.server.grant(n.client.client_credential(kOtherNonce), kOtherNonce);
    CHECK_THROWS_WITH_AS(n.client.accept(grant.credential, kNonce), doctest::Contains("not for this job"), AuthError);
  }
  SUBCASE("a client's credential sent back as the host's") {
    CHECK_THROWS_AS(n.client.accept(n.client.client_credential(kNonce), kNonce), AuthError);
  }
  SUBCASE("another job's host, for this connection") {
    MungeKeyExchange other_client(n.munge, "SLURM job 43, run 43.0", 1000);
    MungeKeyExchange other_host(n.munge, "SLURM job 43, run 43.0", 1000);
    const auto grant = other_host.grant(other_client.client_credential(kNonce), kNonce);
    CHECK_THROWS_WITH_AS(n.client.accept(grant.credential, kNonce), doctest::Contains("not for this job"), AuthError);
  }
}

TEST_CASE("MUNGE key exchange: another job's host refuses this job's client") {
  Nodes n;
  MungeKeyExchange other(n.munge, "SLURM job 43, run 43.0", 1000);
  CHECK_THROWS_AS(other.grant(n.client.client_credential(kNonce), kNonce), AuthError);
}

TEST_CASE("munged's socket from slurm.conf's AuthInfo") {
  CHECK(munge_socket_from_slurm_conf("ClusterName=x\nAuthType=auth/munge\n") == "");
  CHECK(munge_socket_from_slurm_conf("AuthInfo=socket=/var/run/m.sock\n") == "/var/run/m.sock");
  CHECK(munge_socket_from_slurm_conf("authinfo = ttl=60, Socket=/s/m.socket ,cred_expire=5 # mine\n") ==
        "/s/m.socket");
  CHECK(munge_socket_from_slurm_conf("AuthInfo=/old/style.socket\n") == "/old/style.socket");
  CHECK(munge_socket_from_slurm_conf("#AuthInfo=socket=/commented\nAuthAltParameters=socket=/no\n") == "");
  CHECK(munge_socket_from_slurm_conf("AuthInfo=socket=/first\nAuthInfo=socket=/last\n") == "/last");
}

TEST_CASE("--rdzv_conf auth and munge_socket") {
  RendezvousConfig c;
  apply_rdzv_conf("auth=munge,munge_socket=/run/m.socket", c);
  CHECK(c.auth == AuthMode::kMunge);
  CHECK(c.munge_socket == "/run/m.socket");
  apply_rdzv_conf("auth=none", c);
  CHECK(c.auth == AuthMode::kNone);
  CHECK_THROWS_WITH_AS(apply_rdzv_conf("auth=kerberos", c), doctest::Contains("expected auto, secret, munge or none"),
                       RendezvousConfigError);
  CHECK_THROWS_AS(apply_rdzv_conf("munge_socket=", c), RendezvousConfigError);
}

}  // namespace
}  // namespace ddprun::elastic
