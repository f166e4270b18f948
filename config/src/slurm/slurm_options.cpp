#include "ddprun/slurm_options.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "ddprun/rdzv_backend.hpp"

namespace ddprun::config {

namespace {

// The value the user gave for `key`: command line, else --config file, else PET_*.
std::optional<std::string> given_value(const OptionSources& given, const std::string& key) {
  for (const RawOptions* source : {&given.cli, &given.file, &given.env}) {
    if (const auto it = source->find(key); it != source->end()) return it->second;
  }
  return std::nullopt;
}

// Whether SLURM's first host and kDefaultRendezvousPort become --rdzv_endpoint. Only for a job
// of several nodes: on one node a static endpoint would become MASTER_ADDR:MASTER_PORT (torchrun's
// rule, see elastic's single_node_master), a fixed port where ddprun picks a free one. And not
// over the user's --master_addr or --master_port with the static backend: an endpoint replaces
// them there, and explicit flags win.
bool infers_endpoint(const slurm::SlurmInference& inference, const OptionSources& given) {
  const auto nnodes = given_value(given, "nnodes");
  int max_nodes = inference.nnodes.value_or(1);
  if (nnodes) {
    const std::string max_text = nnodes->substr(nnodes->find(':') + 1);  // "N" or "MIN:MAX"
    // strtol saturates where atoi's overflow is undefined; a bad value is resolve_config's to reject.
    max_nodes = static_cast<int>(std::clamp(std::strtol(max_text.c_str(), nullptr, 10), 0L, 1L << 30));
    if (max_nodes < 1) return true;  // resolve_config rejects it, naming --nnodes
  }
  if (max_nodes <= 1) return false;
  const bool is_static =
      parse_rdzv_backend(given_value(given, "rdzv_backend").value_or("static")) == RdzvBackend::kStatic;
  return !(is_static && (given.given("master_addr") || given.given("master_port")));
}

}  // namespace

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
    if (infers_endpoint(inference, given)) {
      options["rdzv_endpoint"] = fmt::format("{}:{}", *inference.master_addr, slurm::kDefaultRendezvousPort);
    }
  }
  if (inference.run_id) options["rdzv_id"] = *inference.run_id;
  if (inference.gpus_on_node && *inference.gpus_on_node > 0) {
    options["nproc_per_node"] = std::to_string(*inference.gpus_on_node);
  }
  return options;
}

}  // namespace ddprun::config
