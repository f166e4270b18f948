#include "tcp/tcp_backends.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "tcp/tcp_rendezvous.hpp"

namespace ddprun::elastic {

namespace {

int static_master_port(const RendezvousConfig& config) {
  return config.master_port > 0 ? config.master_port : kDefaultMasterPort;
}

std::unique_ptr<Rendezvous> make(asio::io_context& io, const RendezvousConfig& config) {
  return std::make_unique<TcpRendezvous>(io, config);
}

// Both backends' checks after the job's: a bad endpoint is an error on one node too.
void check_endpoint(const RendezvousConfig& c) {
  if (!c.endpoint.empty()) parse_endpoint(c.endpoint, 0);
  if (c.max_nodes == 1) return;  // a single node meets nobody: no endpoint, id or rank needed
  const Endpoint endpoint = tcp_endpoint(c);
  if (endpoint.port == 0) {
    throw RendezvousConfigError(fmt::format(
        "rendezvous endpoint {}:0: a multi-node job needs a fixed port that every node knows", endpoint.host));
  }
}

void check_static_job(const RendezvousConfig& c) {
  if (c.min_nodes != c.max_nodes) {
    throw RendezvousConfigError(
        fmt::format("--nnodes={}:{} needs --rdzv_backend=c10d; the static backend takes a fixed --nnodes=N",
                    c.min_nodes, c.max_nodes));
  }
  if (c.spares > 0) {
    throw RendezvousConfigError(fmt::format(
        "--rdzv_conf spares={} needs --rdzv_backend=c10d or etcd: the static backend gives every node a --node_rank "
        "below --nnodes, and a spare has none",
        c.spares));
  }
}

void check_static(const RendezvousConfig& c) {
  check_endpoint(c);
  if (c.max_nodes > 1 && c.node_rank < 0) {
    throw RendezvousConfigError(
        fmt::format("the static rendezvous backend needs --node_rank (0 to {}) on every node", c.max_nodes - 1));
  }
}

void check_c10d(const RendezvousConfig& c) {
  check_endpoint(c);
  if (c.max_nodes > 1 && c.run_id.empty()) {
    throw RendezvousConfigError(
        "a multi-node c10d rendezvous needs --rdzv_id, so that jobs sharing an endpoint stay apart");
  }
}

// For the static backend, --rdzv_endpoint when given (its port, or --master_port when it has
// none), as torchrun does.
OneNodeMaster static_one_node_master(const RendezvousConfig& config) {
  if (config.endpoint.empty()) return {Endpoint{config.master_addr, config.master_port}, false};
  return {parse_endpoint(config.endpoint, config.master_port), parse_endpoint(config.endpoint, -1).port >= 0};
}

}  // namespace

BackendEntry static_backend() {
  BackendEntry e;
  e.id = Backend::kStatic;
  e.check_job = check_static_job;
  e.check = check_static;
  e.endpoint = tcp_endpoint;
  e.one_node_master = static_one_node_master;
  e.make = make;
  return e;
}

BackendEntry c10d_backend() {
  BackendEntry e;
  e.id = Backend::kC10d;
  e.check = check_c10d;
  e.endpoint = tcp_endpoint;
  e.make = make;
  return e;
}

Endpoint tcp_endpoint(const RendezvousConfig& config) {
  const bool is_static = config.backend == Backend::kStatic;
  if (!config.endpoint.empty()) {
    return parse_endpoint(config.endpoint, is_static ? static_master_port(config) : kDefaultEndpointPort);
  }
  if (is_static) return Endpoint{config.master_addr, static_master_port(config)};
  throw RendezvousConfigError("the c10d rendezvous backend needs --rdzv_endpoint=HOST[:PORT]");
}

Hosting hosts_rendezvous(const RendezvousConfig& config, const std::vector<std::string>& endpoint_addrs,
                         const std::vector<std::string>& own_addrs) {
  if (config.is_host) return *config.is_host ? Hosting::kYes : Hosting::kNo;
  if (config.backend == Backend::kStatic) return config.node_rank == 0 ? Hosting::kYes : Hosting::kNo;
  const bool local = std::any_of(endpoint_addrs.begin(), endpoint_addrs.end(), [&](const std::string& addr) {
    return std::find(own_addrs.begin(), own_addrs.end(), addr) != own_addrs.end();
  });
  return local ? Hosting::kIfPortFree : Hosting::kNo;
}

}  // namespace ddprun::elastic
