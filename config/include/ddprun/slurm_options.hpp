// ddprun's options as SLURM implies them, for `srun ddprun ...` with no extra flags.
#pragma once

#include "ddprun/launch_config.hpp"
#include "ddprun/slurm_env.hpp"

namespace ddprun::config {

// The options SLURM implies (nnodes, node_rank, master_addr on the first node, and the
// rendezvous endpoint there for a job of several nodes unless the user gave --master_addr or
// --master_port with the static backend; run id from the job and step, nproc_per_node from
// SLURM_GPUS_ON_NODE), to go in OptionSources::inferred. Throws UsageError with SLURM's layout
// problem when this ddprun has no node rank (several ddprun tasks on a node) and the user did
// not give --nnodes and --node_rank.
RawOptions options_from_slurm(const slurm::SlurmInference& inference, const OptionSources& given);

}  // namespace ddprun::config
