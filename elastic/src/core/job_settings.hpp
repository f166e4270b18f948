// What the job is told by its host (JobSettings) and what a node says of itself when it joins
// (NodeSpec), each holding the settings every node must share (SharedSettings): the data
// join_refusal.hpp checks one against the other and JobCoordinator runs on.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/quarantine.hpp"
#include "core/restart_policy.hpp"
#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

using NodeId = std::uint64_t;

// What a coordinator has learnt of the job that the next one must go on from (the etcd
// rendezvous keeps it in its state key, for a new leader): the restart policy's history (none:
// the policy starts afresh from restarts_used), each node's hardware-like root causes still in
// the window, the nodes quarantined, the last restart's reason.
struct JobHistory {
  std::optional<RestartPolicy::History> restart;
  std::map<NodeId, std::vector<SuspectFailure>> suspects;
  std::vector<QuarantinedNode> quarantined;
  RestartReason restart_reason;  // the last restart's, which the next round's assignments carry
};

// What every node of a job must have alike: a node whose own differ is refused, with the one
// that differs named (join_refusal.hpp). The host's are the job's (JobSettings); a joining
// node says its own (NodeSpec). A base of both, so that each reads them as its own fields and
// the wire keeps NodeSpec's fields flat.
struct SharedSettings {
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  RestartSettings restart;  // the rest of the restart policy (restart_policy.hpp)
  // --rdzv_conf heartbeat_interval, heartbeat_timeout (RendezvousTimeouts): the host answers a
  // node's heartbeats by its own (elastic/README.md), so a node with a shorter timeout could take
  // a live host for lost.
  double heartbeat_interval = 0.5;
  double heartbeat_timeout = 5;
  // --chaos as chaos_text() writes it ("off": none): a rehearsal of failures is on only when every
  // node asks for it, with the same spec (launcher/chaos/).
  std::string chaos = "off";
};

// The job's identity and policy, set by the node that hosts the rendezvous.
struct JobSettings : SharedSettings {
  double join_timeout = 600;  // see RendezvousTimeouts
  double last_call_timeout = 30;
  double close_timeout = 60;
  // Rounds in a row that nodes joining or leaving may end within last_call_timeout of their
  // start without costing a restart; each one more costs one of max_restarts.
  int max_membership_changes = 1 << 30;
  // Nodes kept beyond max_nodes as hot spares (--rdzv_conf spares): they have joined, start no
  // workers, and the earliest joined takes the place of a node that is lost in the next round.
  // -1: any number; a node beyond max_nodes + spares is refused.
  int spares = -1;
  // Where an earlier coordinator of the same job left off (the etcd rendezvous elects a new
  // one when its leader is lost): rounds already held, and restarts of max_restarts spent.
  int rounds_before = 0;
  int restarts_used = 0;
  JobHistory history;
  QuarantineSettings quarantine;  // --rdzv_conf quarantine_after, quarantine_window
};

// What a node says about itself when it joins: its SharedSettings, which must equal the job's
// or the node is refused, and this node's own.
struct NodeSpec : SharedSettings {
  int node_rank = -1;  // -1: any
  int nproc = 1;
  std::string addr;      // advertised address, MASTER_ADDR when this node gets group rank 0
  std::string hostname;  // for messages
  int master_port = 0;   // a port it holds free on addr, MASTER_PORT when it gets group rank 0
  // What the node says; the coordinator believes only its transport (Joiner), and refuses a
  // peer that says so.
  bool hosts_rendezvous = false;
  bool agent_store = false;  // it serves the workers' store on master_port when it gets group rank 0
  std::string snapshot_node;  // its snapshot replicator, if any (port 0: none)
  int snapshot_port = 0;
};

// Who a joining node is, as the transport knows it without asking the node: the launcher the
// coordinator runs in (the TCP server's own connection, made in its process; the single node
// in process), or any other node. Never taken from the node's message.
enum class Joiner { kPeer, kHost };

}  // namespace ddprun::elastic
