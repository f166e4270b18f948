// For the hostlist tests: a host list as one string, so that a failed comparison prints both sides.
#pragma once

#include <string>
#include <vector>

namespace ddprun::slurm::testing {

using Hosts = std::vector<std::string>;

// The hosts in order, separated by one space.
inline std::string joined(const Hosts& hosts) {
  std::string out;
  for (const std::string& h : hosts) out += (out.empty() ? "" : " ") + h;
  return out;
}

}  // namespace ddprun::slurm::testing
