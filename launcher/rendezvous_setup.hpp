// The rendezvous side of the launch configuration: the RendezvousConfig a LaunchConfig and the
// environment make (backend, endpoint, nodes, --rdzv_conf, the secret, the run id), shared by
// ddprun's main() and the launch-configuration fuzz target.
#pragma once

#include <map>
#include <ostream>
#include <string>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous_config.hpp"

namespace ddprun::launcher {

// Builds and validates this node's rendezvous configuration; `notes` gets a line for each
// torchrun --rdzv_conf key that configures torchrun's own store and has no effect here. Without
// --rdzv_id, a single node gets a random run id and a static job one made from the endpoint.
// Throws elastic::RendezvousConfigError (a ddprun::UserError), naming the setting, when it
// cannot work.
elastic::RendezvousConfig rendezvous_config_for(const config::LaunchConfig& cfg,
                                                const std::map<std::string, std::string>& vars,
                                                std::ostream& notes);

}  // namespace ddprun::launcher
