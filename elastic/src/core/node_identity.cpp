#include "core/node_identity.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "ddprun/exit_codes.hpp"
#include "ddprun/system.hpp"

namespace ddprun::elastic {

namespace {

SharedSettings shared_settings(const RendezvousConfig& config) {
  SharedSettings s;
  s.run_id = config.run_id;
  s.min_nodes = config.min_nodes;
  s.max_nodes = config.max_nodes;
  s.max_restarts = config.max_restarts;
  s.restart = config.restart;
  s.heartbeat_interval = config.timeouts.heartbeat_interval;
  s.heartbeat_timeout = config.timeouts.heartbeat_timeout;
  s.chaos = config.chaos;
  return s;
}

}  // namespace

JobSettings job_settings(const RendezvousConfig& config) {
  JobSettings s;
  static_cast<SharedSettings&>(s) = shared_settings(config);
  s.join_timeout = config.timeouts.join_timeout;
  s.last_call_timeout = config.timeouts.last_call_timeout;
  s.close_timeout = config.timeouts.close_timeout;
  s.max_membership_changes =
      config.max_membership_changes >= 0 ? config.max_membership_changes : 4 * config.max_nodes;
  s.spares = config.spares;
  // A window of 0 turns quarantine off as quarantine_after=0 does.
  s.quarantine.after = config.quarantine_window > 0 ? config.quarantine_after : 0;
  s.quarantine.window = config.quarantine_window;
  return s;
}

NodeSpec node_spec(const RendezvousConfig& config, std::string addr, int master_port, bool hosts_rendezvous) {
  NodeSpec spec;
  static_cast<SharedSettings&>(spec) = shared_settings(config);
  spec.node_rank = config.node_rank;
  spec.nproc = config.nproc;
  spec.addr = std::move(addr);
  spec.hostname = host_name();
  spec.master_port = master_port;
  spec.hosts_rendezvous = hosts_rendezvous;
  spec.agent_store = config.agent_store;
  spec.snapshot_node = config.snapshot_node;
  spec.snapshot_port = config.snapshot_port;
  return spec;
}

JobOutcome rendezvous_failure(std::string error, int restarts) {
  JobOutcome outcome;
  outcome.exit_code = exit_code::kRendezvous;
  outcome.error = std::move(error);
  outcome.restarts = restarts;
  outcome.retryable = true;  // the nodes may meet another time
  return outcome;
}

}  // namespace ddprun::elastic

namespace ddprun::elastic {

std::vector<std::string> interface_addresses() {
  std::vector<std::string> addresses;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return addresses;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    addresses.emplace_back(text);
  }
  freeifaddrs(list);
  return addresses;
}

}  // namespace ddprun::elastic
