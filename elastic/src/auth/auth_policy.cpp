#include "auth/auth_policy.hpp"

#include <fmt/format.h>

#include "auth/munge_auth.hpp"
#include "auth/rendezvous_auth.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/user_error.hpp"
#include "ddprun/system.hpp"

namespace ddprun::elastic {

namespace {

constexpr std::string_view kGiveSecret =
    "give every node the same secret with --rdzv_conf secret_file=PATH or DDPRUN_RDZV_SECRET";

AuthDecision open(std::string_view why) {
  AuthDecision d;
  d.mode = AuthMode::kNone;
  d.line = fmt::format(
      "ddprun: warning: the rendezvous is open{}: anyone who can reach its port can join or end this job; {}", why,
      kGiveSecret);
  return d;
}

// Whether munged answers: "" when it does (config.munge_socket: slurm.conf's AuthInfo socket
// when none was given), else why not (the socket cleared).
std::string munge_problem(RendezvousConfig& config, const std::string& slurm_conf) {
  if (config.munge_socket.empty() && !slurm_conf.empty()) {
    config.munge_socket = munge_socket_from_slurm_conf(read_file(slurm_conf).value_or(""));
  }
  try {
    open_munge(config.munge_socket);
    return {};
  } catch (const MungeError& e) {
    config.munge_socket.clear();
    return e.what();
  }
}

constexpr std::string_view kNotCopied = "ddprun: snapshots are not copied to the other nodes, so a node's loss loses its files";

std::string munge_scope(const std::string& slurm_job_id, const std::string& run_id) {
  return slurm_job_id.empty() ? "run " + run_id : "SLURM job " + slurm_job_id + ", run " + run_id;
}

}  // namespace

AuthDecision choose_replication_auth(const ReplicationAuthInputs& in, const std::function<std::string()>& munge_problem) {
  AuthDecision d;
  if (in.rendezvous == AuthMode::kMunge) {
    d.mode = AuthMode::kMunge;
    d.munge_scope = in.rendezvous_scope;
    return d;
  }
  if (in.has_secret) {
    d.mode = AuthMode::kSecret;
    return d;
  }
  if (in.ddprun_guards) {
    d.line = fmt::format(
        "{}: the rendezvous is not authenticated, and the copies never go unauthenticated; {}, or use MUNGE where "
        "munged runs (under SLURM by default, else --rdzv_conf auth=munge)",
        kNotCopied, kGiveSecret);
    return d;
  }
  if (in.slurm_job_id.empty()) {
    d.line = fmt::format(
        "{}: the etcd rendezvous has no key of ddprun's to authenticate the copies with (and MUNGE is used only under "
        "SLURM); {} (etcd's rendezvous does not use it, the copies do)",
        kNotCopied, kGiveSecret);
    return d;
  }
  if (const std::string problem = munge_problem(); !problem.empty()) {
    d.line = fmt::format(
        "{}: the etcd rendezvous has no key of ddprun's to authenticate the copies with, and MUNGE cannot be used "
        "({}); {} (etcd's rendezvous does not use it, the copies do)",
        kNotCopied, problem, kGiveSecret);
    return d;
  }
  d.mode = AuthMode::kMunge;
  d.munge_scope = munge_scope(in.slurm_job_id, in.run_id);
  d.line = fmt::format("ddprun: the snapshot copies between the nodes are authenticated with MUNGE ({})", d.munge_scope);
  return d;
}

std::optional<ReplicationAuth> decide_replication_auth(RendezvousConfig& config, const AuthStance& stance,
                                                       const std::string& slurm_job_id, const std::string& slurm_conf,
                                                       std::string& line) {
  ReplicationAuthInputs in;
  in.ddprun_guards = stance.ddprun_guards();
  in.rendezvous = config.munge_scope.empty() ? config.auth : AuthMode::kMunge;
  in.rendezvous_scope = config.munge_scope;
  in.has_secret = !config.secret.empty();
  in.slurm_job_id = slurm_job_id;
  in.run_id = config.run_id;
  const AuthDecision d = choose_replication_auth(in, [&] { return munge_problem(config, slurm_conf); });
  line = d.line;
  if (d.mode == AuthMode::kNone) return std::nullopt;
  ReplicationAuth out;
  if (d.mode == AuthMode::kMunge) {
    out.munge_socket = config.munge_socket;
    out.munge_scope = d.munge_scope;
  } else {
    out.secret = config.secret;
  }
  return out;
}

AuthDecision choose_auth(const AuthInputs& in, const std::function<std::string()>& munge_problem) {
  if (!in.stance.ddprun_guards()) {
    if (in.requested != AuthMode::kAuto) throw RendezvousConfigError(std::string(in.stance.auth_refused));
    AuthDecision d;
    if (in.has_secret) d.line = in.stance.secret_unused;
    return d;
  }
  if (in.has_secret) {
    if (in.requested == AuthMode::kMunge || in.requested == AuthMode::kNone) {
      throw RendezvousConfigError(fmt::format("--rdzv_conf auth={} contradicts the secret given ({}); drop one of them",
                                              in.requested == AuthMode::kMunge ? "munge" : "none", in.secret_source));
    }
    AuthDecision d;
    d.mode = AuthMode::kSecret;
    return d;
  }
  if (in.requested == AuthMode::kSecret) {
    throw RendezvousConfigError(fmt::format("--rdzv_conf auth=secret needs the job's secret; {}", kGiveSecret));
  }
  if (in.requested == AuthMode::kNone) return open(" (--rdzv_conf auth=none)");
  if (in.requested == AuthMode::kAuto && in.slurm_job_id.empty()) return open("");
  if (const std::string problem = munge_problem(); !problem.empty()) {
    if (in.requested == AuthMode::kMunge) {
      throw RendezvousConfigError(fmt::format("--rdzv_conf auth=munge: MUNGE cannot be used: {}", problem));
    }
    return open(fmt::format(" (MUNGE cannot be used: {})", problem));
  }
  AuthDecision d;
  d.mode = AuthMode::kMunge;
  d.munge_scope = munge_scope(in.slurm_job_id, in.run_id);
  d.line = fmt::format("ddprun: the rendezvous is authenticated with MUNGE ({})", d.munge_scope);
  return d;
}

std::string decide_auth(RendezvousConfig& config, const AuthStance& stance, const std::string& slurm_job_id,
                        const std::string& slurm_conf) {
  AuthInputs in;
  in.stance = stance;
  in.requested = config.auth;
  in.has_secret = !config.secret.empty();
  in.secret_source = config.secret_file.empty() ? "DDPRUN_RDZV_SECRET" : "secret_file";
  in.slurm_job_id = slurm_job_id;
  in.run_id = config.run_id;
  const AuthDecision d = choose_auth(in, [&] { return munge_problem(config, slurm_conf); });
  config.auth = d.mode;
  config.munge_scope = d.munge_scope;
  // Here rather than at the first handshake, in the middle of the rendezvous.
  if (const std::string problem = load_libcrypto(); d.mode != AuthMode::kNone && !problem.empty()) {
    throw UserError(problem, exit_code::kRendezvous);
  }
  return d.line;
}

}  // namespace ddprun::elastic
