// The one place that knows every backend.
#include <asio.hpp>

#include "ddprun/rendezvous.hpp"
#include "local/local_rendezvous.hpp"
#include "tcp/tcp_rendezvous.hpp"
#if DDPRUN_ETCD
#include "etcd/etcd_rendezvous.hpp"
#endif

namespace ddprun::elastic {

std::unique_ptr<Rendezvous> make_rendezvous(asio::io_context& io, const RendezvousConfig& config) {
  validate(config);  // refuses etcd in a build without it
  if (config.max_nodes == 1) return std::make_unique<LocalRendezvous>(io, config);
#if DDPRUN_ETCD
  if (config.backend == Backend::kEtcd) return std::make_unique<EtcdRendezvous>(io, config);
#endif
  return std::make_unique<TcpRendezvous>(io, config);
}

}  // namespace ddprun::elastic
