// --chaos on the agent's loop: the schedule's faults injected into this node's job at their
// times, each into a round that trains (every rank has made progress since its workers started)
// and no fault has hit yet; a fault due while the job starts or recovers waits for the next round
// to train, as the goodput benchmark's driver waits (scripts/bench/goodput.py). What it does:
// kill: SIGKILL the worker; hang: SIGSTOP it (the hang detection of --hang_timeout finds it, and
// the stop of the workers continues it, so that it gets the SIGTERM); node: SIGKILL every worker
// and then this ddprun (a node lost), except on the round's group rank 0, whose ddprun holds the
// workers' store and usually the rendezvous: there a `kill` instead.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "chaos/chaos_schedule.hpp"
#include "ddprun/chaos_spec.hpp"

namespace ddprun::launcher {

class ChaosInjector {
 public:
  struct Hooks {
    std::function<bool()> training;         // whether the round trains now (the goodput ledger's view)
    std::function<pid_t(int local_rank)> worker;  // a live worker's pid; 0: none
    // A fault was injected into `pid` (0 for a node fault's ddprun), as `kind` (a node fault on
    // group rank 0 or the rendezvous's host is made a kill), at `at` (seconds since ddprun's
    // start). Called before a node fault kills this ddprun: what it writes must be written at once.
    std::function<void(const ChaosFault& fault, ChaosKind kind, pid_t pid, double at)> injected;
  };

  // `start`: ddprun's start on monotonic_seconds()'s clock, which the schedule counts from.
  ChaosInjector(asio::io_context& io, const config::ChaosSpec& spec, int nproc, double start, Hooks hooks);

  // This node's workers started, for the round where it has `group_rank`: the first start fixes
  // the schedule's stream and arms the first fault. `hosts_rendezvous`: this ddprun serves the
  // rendezvous, whose loss would end the job rather than rehearse a node's: a node fault is made
  // a kill there, as on group rank 0 (which holds the workers' store).
  void workers_started(int group_rank, bool hosts_rendezvous = false);
  // Training (re)started: a fault that came due while it did not is injected now.
  void training_started();
  // The workers are being stopped: a worker this stopped is continued, so that it ends.
  void release();
  // Whether a fault was injected into the workers that run now (since workers_started()).
  bool hit() const { return hit_; }

 private:
  void arm();
  void due();
  void inject();

  asio::steady_timer timer_;
  config::ChaosSpec spec_;
  int nproc_;
  double start_;
  Hooks hooks_;
  std::optional<ChaosSchedule> schedule_;
  ChaosFault next_;
  bool waiting_ = false;  // next_ is due and waits for a round that trains
  bool hit_ = false;
  int group_rank_ = 0;
  bool keeps_node_ = true;  // a node fault is made a kill: group rank 0, or the rendezvous's host
  pid_t stopped_ = 0;     // the worker a hang fault stopped, until release()
};

}  // namespace ddprun::launcher
