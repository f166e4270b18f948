// The rows of the two backends the TCP rendezvous serves (--rdzv_backend=static and c10d), and
// the rules in which they differ: where the nodes meet and who hosts.
#pragma once

#include <string>
#include <vector>

#include "core/backend_entry.hpp"

namespace ddprun::elastic {

// torchrun's static rendezvous: a fixed --nnodes=N, every node given its --node_rank, node 0
// hosting at --rdzv_endpoint or --master_addr:--master_port.
BackendEntry static_backend();
// torchrun's c10d rendezvous: elastic --nnodes=MIN:MAX, spares, hosted by the node whose address
// is --rdzv_endpoint's; needs --rdzv_id.
BackendEntry c10d_backend();

// Where the nodes meet: --rdzv_endpoint (29400 when it has no port), or for the static backend
// --master_addr:--master_port without one (--master_port, else 29500, when the endpoint has no
// port), as torchrun does.
Endpoint tcp_endpoint(const RendezvousConfig& config);

// Whether this node hosts the rendezvous server: as is_host says when given; for the static
// backend, node_rank 0 does; otherwise a node hosts if it can when one of the endpoint's
// addresses is this host's (an interface address, or --local_addr's). Such a node that finds
// the port taken joins as a client instead: another launcher on the same machine got there first.
enum class Hosting { kNo, kIfPortFree, kYes };
Hosting hosts_rendezvous(const RendezvousConfig& config, const std::vector<std::string>& endpoint_addrs,
                         const std::vector<std::string>& own_addrs);

}  // namespace ddprun::elastic
