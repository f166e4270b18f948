#include <asio.hpp>

#include "ddprun/rendezvous.hpp"
#include "etcd_rendezvous.hpp"
#include "local_rendezvous.hpp"
#include "tcp_rendezvous.hpp"

namespace ddprun::elastic {

std::unique_ptr<Rendezvous> make_rendezvous(asio::io_context& io, const RendezvousConfig& config) {
  validate(config);
  if (config.max_nodes == 1) return std::make_unique<LocalRendezvous>(io, config);
  if (config.backend == Backend::kEtcd) return std::make_unique<EtcdRendezvous>(io, config);
  return std::make_unique<TcpRendezvous>(io, config);
}

}  // namespace ddprun::elastic
