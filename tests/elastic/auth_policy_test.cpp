// choose_auth and decide_auth (elastic/src/auth/auth_policy.cpp): which authentication the
// nodes use, and what ddprun says about it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "auth/auth_policy.hpp"
#include "backends.hpp"

namespace ddprun::elastic {
namespace {

struct Row {
  const char* name;
  AuthStance stance;
  AuthMode requested;
  bool secret;
  const char* slurm_job;
  const char* munge_problem;  // what the probe says; "" munged answers
  // Expected:
  bool probes;        // munged is asked
  const char* error;  // a part of the RendezvousConfigError; "" none
  AuthMode mode;
  const char* line;   // a part of the line said; "" nothing said
};

TEST_CASE("choose_auth: the rules as a table") {
  using A = AuthMode;
  const AuthStance tcp = backend_entry(Backend::kC10d).auth, st = backend_entry(Backend::kStatic).auth,
                   etcd = backend_entry(Backend::kEtcd).auth;
  const std::vector<Row> rows = {
      {"etcd, nothing asked", etcd, A::kAuto, false, "42", "", false, "", A::kNone, ""},
      {"etcd with a secret: said not to guard etcd", etcd, A::kAuto, true, "", "", false, "", A::kNone,
       "the rendezvous secret does not guard the etcd backend"},
      {"etcd with auth=munge: refused", etcd, A::kMunge, false, "42", "", false, "auth= applies to the static and c10d",
       A::kNone, ""},
      {"etcd with auth=none: refused", etcd, A::kNone, false, "", "", false, "auth= applies to the static and c10d",
       A::kNone, ""},
      {"a secret", tcp, A::kAuto, true, "42", "", false, "", A::kSecret, ""},
      {"a secret, auth=secret", st, A::kSecret, true, "", "", false, "", A::kSecret, ""},
      {"a secret with auth=munge", tcp, A::kMunge, true, "42", "", false, "auth=munge contradicts the secret given",
       A::kNone, ""},
      {"a secret with auth=none", tcp, A::kNone, true, "", "", false, "auth=none contradicts the secret given",
       A::kNone, ""},
      {"auth=secret without one", tcp, A::kSecret, false, "42", "", false, "auth=secret needs the job's secret",
       A::kNone, ""},
      {"auth=none", tcp, A::kNone, false, "42", "", false, "", A::kNone, "open (--rdzv_conf auth=none)"},
      {"outside SLURM", tcp, A::kAuto, false, "", "", false, "", A::kNone, "ddprun: warning: the rendezvous is open:"},
      {"under SLURM, munged answers", tcp, A::kAuto, false, "42", "", true, "", A::kMunge,
       "authenticated with MUNGE (SLURM job 42, run r1)"},
      {"under SLURM, no munged", tcp, A::kAuto, false, "42", "no socket", true, "", A::kNone,
       "open (MUNGE cannot be used: no socket)"},
      {"auth=munge outside SLURM", st, A::kMunge, false, "", "", true, "", A::kMunge,
       "authenticated with MUNGE (run r1)"},
      {"auth=munge, no munged", tcp, A::kMunge, false, "42", "no socket", true,
       "auth=munge: MUNGE cannot be used: no socket", A::kNone, ""},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    AuthInputs in;
    in.stance = row.stance;
    in.requested = row.requested;
    in.has_secret = row.secret;
    in.secret_source = "secret_file";
    in.slurm_job_id = row.slurm_job;
    in.run_id = "r1";
    bool probed = false;
    const auto probe = [&] {
      probed = true;
      return std::string(row.munge_problem);
    };
    if (*row.error) {
      CHECK_THROWS_WITH_AS(choose_auth(in, probe), doctest::Contains(row.error), RendezvousConfigError);
    } else {
      const AuthDecision d = choose_auth(in, probe);
      CHECK(d.mode == row.mode);
      if (*row.line) {
        CHECK(d.line.find(row.line) != std::string::npos);
      } else {
        CHECK(d.line.empty());
      }
      CHECK(d.munge_scope.empty() == (row.mode != A::kMunge));
    }
    CHECK(probed == row.probes);
  }
}

TEST_CASE("decide_auth: which authentication a node uses, and what it says") {
  RendezvousConfig c;
  c.run_id = "42.0";
  SUBCASE("a secret wins, and contradicting it is an error") {
    c.secret = "s";
    CHECK(decide_auth(c, "42", "").empty());
    CHECK(c.auth == AuthMode::kSecret);
    c.auth = AuthMode::kMunge;
    CHECK_THROWS_WITH_AS(decide_auth(c, "42", ""), doctest::Contains("auth=munge contradicts"), RendezvousConfigError);
    c.auth = AuthMode::kNone;
    CHECK_THROWS_AS(decide_auth(c, "42", ""), RendezvousConfigError);
  }
  SUBCASE("auth=secret without one") {
    c.auth = AuthMode::kSecret;
    CHECK_THROWS_WITH_AS(decide_auth(c, "", ""), doctest::Contains("needs the job's secret"), RendezvousConfigError);
  }
  SUBCASE("outside SLURM without a secret: open, with a warning") {
    CHECK(decide_auth(c, "", "").rfind("ddprun: warning: the rendezvous is open:", 0) == 0);
    CHECK(c.munge_scope.empty());
  }
  SUBCASE("auth=none") {
    c.auth = AuthMode::kNone;
    CHECK(decide_auth(c, "42", "").find("open (--rdzv_conf auth=none)") != std::string::npos);
    CHECK(c.munge_scope.empty());
  }
  SUBCASE("under SLURM with no munged at the socket: open, saying why; auth=munge: an error") {
    c.munge_socket = "/nonexistent/munge.socket";
    const std::string said = decide_auth(c, "42", "");
    CHECK(said.find("open (MUNGE cannot be used: ") != std::string::npos);
    CHECK(c.munge_scope.empty());
    c.auth = AuthMode::kMunge;
    c.munge_socket = "/nonexistent/munge.socket";
    CHECK_THROWS_WITH_AS(decide_auth(c, "42", ""), doctest::Contains("auth=munge: MUNGE cannot be used"),
                         RendezvousConfigError);
  }
}

TEST_CASE("choose_replication_auth: how the snapshot copies authenticate, as a table; never unauthenticated") {
  using A = AuthMode;
  struct CopyRow {
    const char* name;
    bool ddprun_guards;
    AuthMode rendezvous;
    bool secret;
    const char* slurm_job;
    const char* munge_problem;
    // Expected:
    bool probes;
    AuthMode mode;
    const char* scope;
    const char* line;  // a part of the line said; "" nothing said
  };
  const std::vector<CopyRow> rows = {
      {"the rendezvous's MUNGE", true, A::kMunge, false, "42", "", false, A::kMunge, "SLURM job 42, run r1", ""},
      {"the rendezvous's secret", true, A::kSecret, true, "42", "", false, A::kSecret, "", ""},
      {"ddprun's rendezvous open, under SLURM", true, A::kNone, false, "42", "", false, A::kNone, "",
       "not copied to the other nodes, so a node's loss loses its files: the rendezvous is not authenticated"},
      {"ddprun's rendezvous open, outside SLURM", true, A::kNone, false, "", "", false, A::kNone, "",
       "DDPRUN_RDZV_SECRET"},
      {"etcd with a secret", false, A::kNone, true, "42", "", false, A::kSecret, "", ""},
      {"etcd under SLURM, munged answers", false, A::kNone, false, "42", "", true, A::kMunge, "SLURM job 42, run r1",
       "the snapshot copies between the nodes are authenticated with MUNGE (SLURM job 42, run r1)"},
      {"etcd under SLURM, no munged", false, A::kNone, false, "42", "no socket", true, A::kNone, "",
       "MUNGE cannot be used (no socket); give every node the same secret"},
      {"etcd outside SLURM", false, A::kNone, false, "", "", false, A::kNone, "",
       "the etcd rendezvous has no key of ddprun's to authenticate the copies with"},
  };
  for (const CopyRow& row : rows) {
    CAPTURE(row.name);
    ReplicationAuthInputs in;
    in.ddprun_guards = row.ddprun_guards;
    in.rendezvous = row.rendezvous;
    in.rendezvous_scope = row.rendezvous == A::kMunge ? "SLURM job 42, run r1" : "";
    in.has_secret = row.secret;
    in.slurm_job_id = row.slurm_job;
    in.run_id = "r1";
    bool probed = false;
    const AuthDecision d = choose_replication_auth(in, [&] {
      probed = true;
      return std::string(row.munge_problem);
    });
    CHECK(d.mode == row.mode);
    CHECK(d.munge_scope == row.scope);
    if (*row.line) {
      CHECK(d.line.find(row.line) != std::string::npos);
    } else {
      CHECK(d.line.empty());
    }
    CHECK(probed == row.probes);
  }
}

TEST_CASE("decide_replication_auth: the value the launcher passes to the replication") {
  RendezvousConfig c;
  c.run_id = "42.0";
  std::string line;
  SUBCASE("the secret") {
    c.secret = "s";
    decide_auth(c, "42", "");
    const auto auth = decide_replication_auth(c, "42", "", line);
    REQUIRE(auth);
    CHECK(auth->secret == "s");
    CHECK(auth->munge_scope.empty());
    CHECK(line.empty());
  }
  SUBCASE("the rendezvous's MUNGE: its socket and scope, no secret") {
    c.auth = AuthMode::kMunge;  // as decide_auth leaves it when munged answered
    c.munge_scope = "SLURM job 42, run 42.0";
    c.munge_socket = "/run/m.socket";
    const auto auth = decide_replication_auth(c, "42", "", line);
    REQUIRE(auth);
    CHECK(auth->secret.empty());
    CHECK(auth->munge_scope == "SLURM job 42, run 42.0");
    CHECK(auth->munge_socket == "/run/m.socket");
  }
  SUBCASE("etcd under SLURM with no munged at the socket: nothing to copy with, said") {
    c.backend = Backend::kEtcd;
    c.munge_socket = "/nonexistent/munge.socket";
    decide_auth(c, "42", "");
    CHECK_FALSE(decide_replication_auth(c, "42", "", line));
    CHECK(line.find("MUNGE cannot be used") != std::string::npos);
  }
}

}  // namespace
}  // namespace ddprun::elastic
