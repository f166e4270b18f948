#include "ddprun/slurm_options.hpp"

#include <fmt/format.h>

namespace ddprun::config {

RawOptions options_from_slurm(const slurm::SlurmInference& inference, const OptionSources& given) {
  RawOptions options;
  if (!inference.in_slurm) return options;
  if (inference.layout_error && !(given.given("nnodes") && given.given("node_rank"))) {
    throw UsageError(*inference.layout_error);
  }
  if (inference.nnodes) options["nnodes"] = std::to_string(*inference.nnodes);
  if (inference.node_rank) options["node_rank"] = std::to_string(*inference.node_rank);
  if (inference.master_addr) {
    options["master_addr"] = *inference.master_addr;
    options["rdzv_endpoint"] = fmt::format("{}:{}", *inference.master_addr, slurm::kDefaultRendezvousPort);
  }
  if (inference.run_id) options["rdzv_id"] = *inference.run_id;
  if (inference.gpus_on_node && *inference.gpus_on_node > 0) {
    options["nproc_per_node"] = std::to_string(*inference.gpus_on_node);
  }
  return options;
}

}  // namespace ddprun::config
