// Prints what infer_from_slurm and worker_identity_from_slurm make of this process's environment,
// as key=value words on one line, for the tests that run it as a task on the real cluster.
#include <unistd.h>

#include <iostream>
#include <optional>
#include <string>

#include "ddprun/slurm_env.hpp"

extern char** environ;

namespace {

template <typename T>
std::string show(const std::optional<T>& v) {
  if (!v) return "-";
  if constexpr (std::is_same_v<T, std::string>) {
    return *v;
  } else {
    return std::to_string(*v);
  }
}

}  // namespace

int main() {
  using namespace ddprun::slurm;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  try {
    const Environment env = environment_from(environ);
    const SlurmInference r = infer_from_slurm(env);
    std::cout << "probe host=" << host << " in_slurm=" << r.in_slurm << " in_step=" << r.in_step
              << " nnodes=" << show(r.nnodes) << " node_rank=" << show(r.node_rank)
              << " master_addr=" << show(r.master_addr) << " run_id=" << show(r.run_id)
              << " gpus=" << show(r.gpus_on_node) << " layout_error=" << r.layout_error.has_value();
    if (const std::optional<WorkerIdentity> w = worker_identity_from_slurm(env)) {
      std::cout << " worker=1 rank=" << w->rank << " local_rank=" << w->local_rank << " world_size=" << w->world_size
                << " local_world_size=" << w->local_world_size << " group_rank=" << w->group_rank
                << " group_world_size=" << w->group_world_size << " master=" << w->master_addr << ':'
                << w->master_port << " run=" << w->run_id;
    } else {
      std::cout << " worker=0";
    }
    std::cout << "\nsummary host=" << host << ": " << r.summary << '\n';
    if (r.layout_error) std::cout << "layout_error host=" << host << ": " << *r.layout_error << '\n';
  } catch (const SlurmEnvError& e) {
    std::cout << "probe host=" << host << " error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
