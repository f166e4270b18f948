// What the multi-node backends share: a Rendezvous whose node side is a NodeRound, whose
// actions this class carries out on the launcher's event loop (the MASTER_PORT's rounds, the
// launcher's handlers), leaving to the backend only how a report reaches the coordinator, how
// the node leaves, and what it releases when the job ends for it.
#pragma once

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "core/event_loop.hpp"
#include "core/node_round.hpp"
#include "ddprun/rendezvous.hpp"
#include "ddprun/rendezvous_config.hpp"
#include "store/master_port.hpp"

namespace ddprun::elastic {

class NodeRendezvous : public Rendezvous {
 public:
  void worker_failed(int round, const WorkerFailure& failure) final;
  void workers_stopped(int round, const std::vector<WorkerFailure>& failures) final;
  void workers_succeeded(int round) final;
  void leave(int signal) final;
  void leave_quarantined(const std::string& why) final;

 protected:
  explicit NodeRendezvous(asio::io_context& io) : io_(io), fence_timer_(io) {}

  // The start of join(): keeps the handlers and holds a free MASTER_PORT for the job (served
  // by the agent store when `config` says so). False when no port could be held: the job has
  // then ended for this node with that error.
  bool start_joining(Handlers handlers, const RendezvousConfig& config);

  // Carries out `actions` in order.
  void apply(NodeRound::Actions actions);

  // The job ends for this node with `outcome` (after its workers stop, if they run).
  void end(JobOutcome outcome) { apply(round_.end(std::move(outcome))); }
  // The rendezvous failed here: exit_code::kRendezvous with `why`.
  void fail(const std::string& why);

  // A message from the coordinator (assign, stop or finish: rendezvous_protocol.hpp); a finish
  // goes to `finish`, for the backend to end the node in its own way. Throws std::exception
  // for anything else, a message without the fields its type needs, or one out of range
  // (check_assignment, check_outcome).
  void handle_message(const nlohmann::json& message, const std::function<void(JobOutcome)>& finish);

  // Fencing (core/fence.hpp). The coordinator, `coordinator` in the lines said, has heard a
  // message this node sent at `sent_at` and counts the node lost only after `lifetime` seconds
  // without a word from it: the node's workers are killed at fence_deadline(sent_at, lifetime)
  // unless this is called again with a later `sent_at` first. Workers that would start after
  // that moment are not started. The fence then ends the job here like fail().
  void coordinator_heard(std::chrono::steady_clock::time_point sent_at, double lifetime,
                         const std::string& coordinator);
  // No fence from now on: the node that runs the coordinator itself.
  void drop_fence();

  // The job's spares or quarantined nodes changed (on the node that runs the coordinator).
  void announce(JobMembership membership) {
    post([m = std::move(membership)](Handlers& h) {
      if (h.membership) h.membership(m);
    });
  }

  // A line of ddprun's own (ending in '\n'), through Handlers::say; nothing when it is unset.
  void say(const std::string& line) const;

  // Sends `message` (the wire protocol's, from this node) to the coordinator.
  virtual void report(const nlohmann::json& message) = 0;
  // The launcher is stopping on `signal`, or (signal 0) leaves as quarantined for `quarantined`:
  // tell the job if the backend can (rendezvous_protocol.hpp's leave_message()).
  virtual void leave_job(int signal, const std::string& quarantined) = 0;
  // The job has ended for this node (finished or left): cancel timers, stop threads. The
  // launcher's finish, if any, is posted after it.
  virtual void release() = 0;

  asio::io_context& io_;
  NodeRound round_;
  std::optional<MasterPort> master_port_;
  Handlers handlers_;
  bool left_ = false;  // the launcher left: no handler is called any more
  int nproc_ = 1;      // this node's workers
  Lifetime lifetime_;

 private:
  bool fence_passed() const;
  bool workers_may_run() const;
  void wait_for_fence();
  // What the fence finds of this node's workers, for the line it says.
  enum class Workers { kMayRun, kEnded, kNoneStarted };
  void fence(Workers workers = Workers::kMayRun);

  asio::steady_timer fence_timer_;
  std::optional<std::chrono::steady_clock::time_point> fence_at_;  // unset: no fence
  std::chrono::steady_clock::time_point heard_at_;  // when the last acknowledged message was sent
  double fence_lifetime_ = 0;
  std::string fence_coordinator_;
  bool fence_timer_armed_ = false;
  bool fenced_ = false;  // once fenced, acknowledgements that come again move nothing

  template <class F>
  void post(F handler) {
    asio::post(io_, [this, alive = lifetime_.token(), handler = std::move(handler)] {
      if (!alive.expired() && !left_) handler(handlers_);
    });
  }
};

}  // namespace ddprun::elastic
