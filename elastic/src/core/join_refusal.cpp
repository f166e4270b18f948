#include "core/join_refusal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <string_view>

#include "ddprun/input_limits.hpp"

namespace ddprun::elastic {
namespace {

// What --nproc_per_node accepts (launch_config.cpp).
constexpr int kMaxNproc = 1 << 20;

// An address a peer may advertise as MASTER_ADDR: an IP address (v6 with a zone, bracketed or
// not) or a host name; nothing that a worker's environment or a console line should not hold.
bool is_host_address(const std::string& addr) {
  return !addr.empty() && addr.size() <= kMaxHostChars && std::all_of(addr.begin(), addr.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view(".-:_%[]").find(c) != std::string_view::npos;
  });
}

// The settings every node must share but the run id (which names the job, and is refused in
// words of its own), in groups that a refusal names together, each written as a command line
// writes it. A group's text differs between two nodes exactly when one of its values does: a
// number of seconds is written as the shortest text that reads back as the same double.
struct SharedGroup {
  const char* what;    // "give every node the same <what>"
  const char* option;  // the option that holds the group, said of this node: "--rdzv_conf "
  std::string (*written)(const SharedSettings& s);
};
const SharedGroup kSharedGroups[] = {
    {"--nnodes", "", [](const SharedSettings& s) { return "--nnodes=" + nnodes(s.min_nodes, s.max_nodes); }},
    {"--max_restarts", "", [](const SharedSettings& s) { return fmt::format("--max_restarts={}", s.max_restarts); }},
    {"restart options", "",
     [](const SharedSettings& s) {
       return fmt::format("--restart_on={} --restart_window={} --restart_backoff_max={} --crash_loop_limit={}",
                          s.restart.restart_on_any ? "any" : "retryable", s.restart.window, s.restart.backoff_max,
                          s.restart.crash_loop_limit);
     }},
    {"heartbeat settings", "--rdzv_conf ",
     [](const SharedSettings& s) {
       return fmt::format("heartbeat_interval={},heartbeat_timeout={}", s.heartbeat_interval, s.heartbeat_timeout);
     }},
};

}  // namespace

std::string nnodes(int min_nodes, int max_nodes) {
  return min_nodes == max_nodes ? std::to_string(min_nodes) : fmt::format("{}:{}", min_nodes, max_nodes);
}

std::optional<std::string> join_refusal(const JobSettings& s, const NodeSpec& spec, Joiner joiner,
                                        const JoinContext& job) {
  if (job.finished) {
    return fmt::format("rendezvous '{}' has already finished; start a new job with another --rdzv_id", s.run_id);
  }
  if (joiner == Joiner::kPeer && spec.hosts_rendezvous) {
    return fmt::format(
        "this node says it hosts the rendezvous, but the rendezvous runs in the launcher of {}; a node hosts it "
        "only in its own process (give one node alone --rdzv_conf is_host=1, or the endpoint's address)",
        job.host ? *job.host : std::string("another node"));
  }
  if (joiner == Joiner::kHost && job.host && !job.host_is_joiner) {
    return fmt::format("the rendezvous host joined a second time, while {} is its first connection", *job.host);
  }
  if (spec.run_id != s.run_id) {
    return fmt::format("this rendezvous endpoint serves run '{}', not '{}'; give every node the same --rdzv_id",
                       s.run_id, shown(spec.run_id));
  }
  // A rehearsal of failures is never on by accident: every node asks for it, alike.
  if (spec.chaos != s.chaos) {
    return fmt::format(
        "--chaos differs: node {} ({}) has --chaos={} but rendezvous '{}' has --chaos={}; a rehearsal of failures runs "
        "only when every node asks for it with the same spec: give every node the same --chaos (or none)",
        shown(spec.hostname), shown(spec.addr), shown(spec.chaos), s.run_id, s.chaos);
  }
  for (const SharedGroup& group : kSharedGroups) {
    const std::string own = group.written(spec);
    const std::string job_s = group.written(s);
    if (own != job_s) {
      return fmt::format("this node has {}{} but rendezvous '{}' has {}; give every node the same {}", group.option,
                         own, s.run_id, job_s, group.what);
    }
  }
  if (spec.node_rank < -1 || spec.node_rank >= s.max_nodes) {
    return fmt::format("--node_rank={} is out of range for --nnodes={} (0 to {})", spec.node_rank,
                       nnodes(s.min_nodes, s.max_nodes), s.max_nodes - 1);
  }
  if (spec.nproc < 1 || spec.nproc > kMaxNproc) {
    return fmt::format("--nproc_per_node={} is out of range (1 to {})", spec.nproc, kMaxNproc);
  }
  if (job.workers + spec.nproc > std::numeric_limits<int>::max()) {
    return fmt::format("--nproc_per_node={} would make the job more than {} workers, with the {} of the nodes joined",
                       spec.nproc, std::numeric_limits<int>::max(), job.workers);
  }
  if (spec.master_port < 1 || spec.master_port > 65535) {
    return fmt::format("this node's MASTER_PORT {} is not a TCP port (1 to 65535)", spec.master_port);
  }
  if (spec.snapshot_port < 0 || spec.snapshot_port > 65535) {
    return fmt::format("this node's snapshot replication port {} is not a TCP port (0 to 65535)", spec.snapshot_port);
  }
  if (spec.snapshot_node.size() > 64 ||
      spec.snapshot_node.find_first_not_of("0123456789abcdef-") != std::string::npos) {
    return fmt::format("this node's snapshot replicator id '{}' is not one ddprun makes", shown(spec.snapshot_node));
  }
  // The host's own address and name come from its command line, already checked.
  if (joiner == Joiner::kPeer && !is_host_address(spec.addr)) {
    return fmt::format("this node's address '{}' is not a host name or IP address", shown(spec.addr));
  }
  // Its control characters parse_peer_json has replaced, as those of all a peer's text.
  if (joiner == Joiner::kPeer && spec.hostname.size() > kMaxHostChars) {
    return fmt::format("this node's host name '{}' has more than {} characters", shown(spec.hostname), kMaxHostChars);
  }
  if (job.joined) return std::string("this node joined twice");
  if (s.spares >= 0 && job.nodes >= static_cast<std::size_t>(s.max_nodes) + s.spares) {
    return fmt::format(
        "rendezvous '{}' already has its {} nodes and {} spare{} (--rdzv_conf spares={}); stop this node or give every "
        "node a larger --rdzv_conf spares",
        s.run_id, s.max_nodes, s.spares, s.spares == 1 ? "" : "s", s.spares);
  }
  if (job.rank_taken_by) {
    return fmt::format("--node_rank={} is already taken by {} in rendezvous '{}'; give each node its own --node_rank",
                       spec.node_rank, *job.rank_taken_by, s.run_id);
  }
  return std::nullopt;
}

}  // namespace ddprun::elastic
