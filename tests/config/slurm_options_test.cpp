// What ddprun infers from a SLURM job for its options, as a table.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ddprun/slurm_options.hpp"

using namespace ddprun::config;

TEST_CASE("SLURM's rendezvous endpoint: several nodes only, and never over the user's master flags") {
  ddprun::slurm::SlurmInference slurm;
  slurm.in_slurm = true;
  slurm.master_addr = "n1";
  struct Case {
    const char* what;
    int slurm_nodes;
    RawOptions cli;
    bool endpoint;  // n1:29400 inferred
  };
  const std::vector<Case> cases = {
      {"two nodes", 2, {}, true},
      // On one node a static endpoint would be MASTER_ADDR:MASTER_PORT, a fixed port.
      {"one node", 1, {}, false},
      {"one SLURM node, --nnodes=2", 1, {{"nnodes", "2"}}, true},
      {"two SLURM nodes, --nnodes=1", 2, {{"nnodes", "1"}}, false},
      {"elastic --nnodes=1:2", 1, {{"nnodes", "1:2"}}, true},
      // Static: an endpoint would replace the user's --master_addr/--master_port.
      {"two nodes, --master_port", 2, {{"master_port", "29600"}}, false},
      {"two nodes, --master_addr", 2, {{"master_addr", "n2"}}, false},
      {"two nodes, c10d, --master_port", 2, {{"rdzv_backend", "c10d"}, {"master_port", "29600"}}, true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    slurm.nnodes = c.slurm_nodes;
    OptionSources given;
    given.cli = c.cli;
    const RawOptions inferred = options_from_slurm(slurm, given);
    CHECK(inferred.at("master_addr") == "n1");
    CHECK(inferred.count("rdzv_endpoint") == (c.endpoint ? 1u : 0u));
    if (c.endpoint) CHECK(inferred.at("rdzv_endpoint") == "n1:29400");
  }
}
