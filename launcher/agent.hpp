// One node's agent: joins the rendezvous, starts this node's workers for each round, watches
// them, forwards their output and signals, stops them, and exits with the job's outcome.
//
// Single-threaded and event-driven: signals arrive through a signalfd (they are blocked, so no
// handler runs), worker exits through SIGCHLD, output through non-blocking pipes, all on one
// asio::io_context. The decisions come from next_transition() (supervisor.hpp).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "ddprun/launch_config.hpp"
#include "ddprun/rendezvous.hpp"
#include "ddprun/snapshot_replication.hpp"
#include "process/containment.hpp"
#include "process/orphan_guard.hpp"
#include "process/worker_group.hpp"
#include "snapshots/snapshot_dir.hpp"

namespace asio {
class io_context;
}

namespace ddprun::launcher {

class Agent {
 public:
  Agent(asio::io_context& io, config::LaunchConfig config, std::map<std::string, std::string> environ,
        std::unique_ptr<elastic::Rendezvous> rendezvous, OrphanGuard& guard, Containment& containment,
        SnapshotDir& snapshots, elastic::SnapshotReplication* replication, RunPaths paths);
  ~Agent();

  // The signals the agent handles must be blocked in every thread before any thread starts.
  static void block_signals(bool debug);

  // Runs the job to its end; returns ddprun's exit code.
  int run();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::launcher
