// The listen backlog of ddprun's servers that thousands connect to at once (the workers' store,
// the TCP rendezvous host): as long as the kernel allows. listen() takes the smaller of this and
// net.core.somaxconn, while SOMAXCONN (asio's max_listen_connections) is glibc's 4096: a cluster
// that raised somaxconn for a large job would not have its queue. A queue that overflows drops
// connections, which the clients' kernels try again only a second later.
#pragma once

#include <limits>

namespace ddprun::elastic {

inline constexpr int kListenBacklog = std::numeric_limits<int>::max();

}  // namespace ddprun::elastic
