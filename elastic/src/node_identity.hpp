// What this node tells the rendezvous about the job and itself, from its RendezvousConfig.
#pragma once

#include <string>
#include <vector>

#include "ddprun/job_coordinator.hpp"
#include "ddprun/rendezvous_config.hpp"

namespace ddprun::elastic {

// The job's settings as this node knows them; the hosting node's are the job's.
JobSettings job_settings(const RendezvousConfig& config);

NodeSpec node_spec(const RendezvousConfig& config, std::string addr, int master_port, bool hosts_rendezvous);

// gethostname(), for messages that name a node.
std::string this_hostname();

// A rendezvous error: exit_code::kRendezvous with `error`.
JobOutcome rendezvous_failure(std::string error, int restarts);

// "SIGTERM", or "signal 64" for a number without a name.
std::string signal_name(int signal);

// The addresses of this host's network interfaces, as text.
std::vector<std::string> interface_addresses();

}  // namespace ddprun::elastic
