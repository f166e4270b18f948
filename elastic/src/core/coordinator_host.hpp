// The one place a JobCoordinator runs on the launcher's io_context, for its three hosts: the
// single node (local/), the TCP server (tcp/) and the etcd leader (etcd/). It feeds the
// coordinator joins, reports (node_report.hpp) and lost nodes, keeps its deadline timer, tells
// of a changed membership, and hands what the coordinator says to the host's transport, which
// only carries messages.
#pragma once

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <cstdint>
#include <string>

#include "core/event_loop.hpp"
#include "core/job_coordinator.hpp"
#include "core/node_report.hpp"

namespace ddprun::elastic {

// What a host does with the coordinator's words.
class CoordinatorTransport {
 public:
  // Carries out `messages` in order. Called after every event, with none too: the job's
  // history may have changed all the same. May destroy the CoordinatorHost that calls it (an
  // etcd leader that is quarantined hands the lead over).
  virtual void deliver(const Messages& messages) = 0;
  // The job's spares or quarantined nodes changed; a host with nobody to tell (the single
  // node, which has neither) keeps this.
  virtual void membership_changed(const JobMembership& /*membership*/) {}

 protected:
  ~CoordinatorTransport() = default;
};

class CoordinatorHost {
 public:
  // Which of the coordinator's deadlines the timer keeps: all of them (joins, the last call,
  // the close of a stopped round, a restart's backoff), or only the backoff: on one node the
  // close deadline would end the job of a launcher whose workers take longer than
  // close_timeout to stop, and nothing else is ever due there.
  enum class Deadlines { kAll, kRestartBackoff };

  // The coordinator starts now (its join timeout with it). `transport` must outlive this.
  CoordinatorHost(asio::io_context& io, JobSettings settings, CoordinatorTransport& transport,
                  Deadlines deadlines = Deadlines::kAll);
  CoordinatorHost(const CoordinatorHost&) = delete;
  CoordinatorHost& operator=(const CoordinatorHost&) = delete;

  void join(NodeId node, const NodeSpec& spec, Joiner joiner);
  void receive(NodeId node, const NodeReport& report);
  // The node's connection closed, its heartbeats stopped or its lease ended; `why` says which.
  void node_gone(NodeId node, const std::string& why);
  // No deadline is kept any more: the job is over for this host (shut down, left, cleaning up).
  void halt();

  const JobCoordinator& coordinator() const { return coordinator_; }

 private:
  void act(const Messages& messages);
  void wait_for_next_deadline();

  JobCoordinator coordinator_;
  CoordinatorTransport& transport_;
  Deadlines deadlines_;
  asio::steady_timer timer_;
  std::uint64_t membership_seen_;  // the coordinator's membership_version() last told
  bool halted_ = false;
  Lifetime lifetime_;
};

}  // namespace ddprun::elastic
