#include "backends.hpp"

#include <algorithm>
#include <asio.hpp>

#include "auth/auth_policy.hpp"
#include "etcd/etcd_backend.hpp"
#include "local/local_rendezvous.hpp"
#include "tcp/tcp_backends.hpp"
#if DDPRUN_ETCD
#include "etcd/etcd_rendezvous.hpp"
#endif

namespace ddprun::elastic {

const std::vector<BackendEntry>& backends() {
  static const std::vector<BackendEntry> rows = {
    static_backend(),
    c10d_backend(),
#if DDPRUN_ETCD
    etcd_backend(make_etcd_rendezvous),
#else
    etcd_backend(nullptr),
#endif
  };
  return rows;
}

const BackendEntry& backend_entry(Backend id) {
  const auto& rows = backends();
  return *std::find_if(rows.begin(), rows.end(), [&](const BackendEntry& row) { return row.id == id; });
}

std::vector<std::string> apply_rdzv_conf(std::string_view conf, RendezvousConfig& config) {
  return apply_rdzv_conf(conf, config, backends());
}

void load_secret(RendezvousConfig& config, const char* env_secret) { load_secret(config, env_secret, backends()); }

void validate(const RendezvousConfig& config) { validate(config, backend_entry(config.backend)); }

Endpoint rendezvous_endpoint(const RendezvousConfig& config) { return backend_entry(config.backend).endpoint(config); }

Endpoint single_node_master(const RendezvousConfig& config) {
  return one_node_master(config, backend_entry(config.backend)).at;
}

std::string decide_auth(RendezvousConfig& config, const std::string& slurm_job_id, const std::string& slurm_conf) {
  return decide_auth(config, backend_entry(config.backend).auth, slurm_job_id, slurm_conf);
}

std::optional<ReplicationAuth> decide_replication_auth(RendezvousConfig& config, const std::string& slurm_job_id,
                                                       const std::string& slurm_conf, std::string& line) {
  return decide_replication_auth(config, backend_entry(config.backend).auth, slurm_job_id, slurm_conf, line);
}

std::unique_ptr<Rendezvous> make_rendezvous(asio::io_context& io, const RendezvousConfig& config) {
  const BackendEntry& backend = backend_entry(config.backend);
  validate(config, backend);  // refuses a backend this build has not (its row's `unbuilt`)
  if (config.max_nodes == 1) return std::make_unique<LocalRendezvous>(io, config, one_node_master(config, backend));
  return backend.make(io, config);
}

}  // namespace ddprun::elastic
