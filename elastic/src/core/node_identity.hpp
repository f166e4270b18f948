// What this node tells the rendezvous about the job and itself, from its RendezvousConfig.
#pragma once

#include <string>
#include <vector>

#include "core/job_coordinator.hpp"
#include "ddprun/rendezvous_config.hpp"
#include "ddprun/system.hpp"

namespace ddprun::elastic {

// The job's settings as this node knows them; the hosting node's are the job's.
JobSettings job_settings(const RendezvousConfig& config);

NodeSpec node_spec(const RendezvousConfig& config, std::string addr, int master_port, bool hosts_rendezvous);

// A rendezvous error: exit_code::kRendezvous with `error`.
JobOutcome rendezvous_failure(std::string error, int restarts);

// The addresses of this host's network interfaces, as text.
std::vector<std::string> interface_addresses();

}  // namespace ddprun::elastic
