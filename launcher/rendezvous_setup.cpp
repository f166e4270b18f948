#include "rendezvous_setup.hpp"

#include <fmt/format.h>

#include <random>

#include "ddprun/input_limits.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun::launcher {

namespace {

std::string random_run_id() {
  std::random_device rd;
  return fmt::format("ddprun-{:08x}{:08x}", rd(), rd());
}

}  // namespace

elastic::RendezvousConfig rendezvous_config_for(const config::LaunchConfig& cfg,
                                                const std::map<std::string, std::string>& vars,
                                                std::ostream& notes) {
  const auto var = [&](const char* name) -> const std::string* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : &it->second;
  };
  elastic::RendezvousConfig r;
  r.backend = config::parse_rdzv_backend(cfg.rdzv_backend).value_or(config::RdzvBackend::kStatic);  // validated
  r.endpoint = cfg.rdzv_endpoint;
  r.master_addr = cfg.master_addr;
  r.master_port = cfg.master_port;
  r.min_nodes = cfg.min_nodes;
  r.max_nodes = cfg.max_nodes;
  r.node_rank = cfg.node_rank;
  r.nproc = cfg.nproc_per_node;
  r.local_addr = cfg.local_addr;
  r.max_restarts = cfg.max_restarts;
  r.chaos = config::chaos_text(cfg.chaos);
  r.restart.restart_on_any = cfg.restart_on_any;
  r.restart.backoff_max = cfg.restart_backoff_max;
  r.restart.crash_loop_limit = cfg.crash_loop_limit;
  r.restart.window = cfg.restart_window;
  // As torchrun reads it: "1" turns the agent store off, anything else leaves it on.
  const std::string* disable_agent_store = var(env::kDisableAgentStore);
  r.agent_store = disable_agent_store == nullptr || *disable_agent_store != "1";
  for (const auto& line : elastic::apply_rdzv_conf(cfg.rdzv_conf, r)) notes << "ddprun: " << line << "\n";
  const std::string* secret = var(env::kRdzvSecret);
  if (cfg.multi_node()) elastic::load_secret(r, secret == nullptr ? nullptr : secret->c_str());
  r.run_id = cfg.rdzv_id;
  if (r.run_id.empty() && !cfg.multi_node()) r.run_id = random_run_id();
  if (r.run_id.empty() && r.backend == elastic::Backend::kStatic) {
    // Every node computes the same id from the endpoint they share (never torchrun's "none").
    const auto endpoint = elastic::rendezvous_endpoint(r);
    r.run_id = fmt::format("static-{}-{}", endpoint.host, endpoint.port);
  }
  elastic::validate(r);
  if (!cfg.multi_node() && !cfg.standalone && !cfg.rdzv_endpoint.empty() && r.backend != elastic::Backend::kStatic) {
    // No silent fallback: a typo in a job script's endpoint would otherwise pass unseen until
    // the job runs on two nodes. (The static backend's endpoint is a one-node job's
    // MASTER_ADDR:MASTER_PORT, and --standalone sets its own.)
    notes << fmt::format("ddprun: --rdzv_endpoint={} is not used: --nnodes={} is one node, which needs no {} "
                         "rendezvous (torchrun would contact it)\n",
                         shown(cfg.rdzv_endpoint), cfg.max_nodes, cfg.rdzv_backend);
  }
  return r;
}

}  // namespace ddprun::launcher
