// This node's workers through one round, for the agent (agent.hpp): their start, each end
// judged (report/worker_end.hpp) and, for a failure, its identity, evidence and kind
// (report/failure_classifier.hpp), handed to the agent's loop as occurrences (occurrence.hpp);
// then the round's end. The workers' records in the event log are written here.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "ddprun/launch_config.hpp"
#include "hangs/hang_watch.hpp"
#include "occurrence.hpp"
#include "output/event_log.hpp"
#include "process/containment.hpp"
#include "process/worker_group.hpp"
#include "report/node_record.hpp"

namespace ddprun::launcher {

class RoundWorkers {
 public:
  // What it reads of the agent's and writes to it; all outlive it.
  struct Context {
    const config::LaunchConfig& config;
    const std::map<std::string, std::string>& environ;
    const config::PythonInterpreter& python;  // for a Python worker's import error
    const RunPaths& paths;
    const NodeSettings& settings;
    const Phase& phase;          // the supervisor's: a failure while stopping is after another
    NodeRecord& node;            // its round; the last failure, set here
    WorkerGroup& group;
    Containment& containment;
    EventLog& events;
    std::function<void(Occurrence)> dispatch;
  };
  explicit RoundWorkers(Context context) : c_(std::move(context)) {}

  // The hang watch, made after this (its hooks call identity() and failed()).
  void watch_hangs(HangWatch& hangs) { hangs_ = &hangs; }

  // Starts the workers of the node's round as its start `attempt`, none at or after `start_by`
  // (the fence's deadline: then Fenced is dispatched); a worker that could not start is
  // dispatched as a failure.
  void start(int attempt, std::optional<std::chrono::steady_clock::time_point> start_by);
  // Children ended (SIGCHLD): each worker's end is dispatched, a success or a failure.
  void reap();
  // The workers are gone: what is left in their pipes is taken and their files cleared. Once a
  // round; true when the round was still open.
  bool end_round();

  // A worker's failure before its end is known: who, where, when.
  elastic::WorkerFailure identity(const WorkerProcess& w) const;
  // A failure found outside a worker's end (a hung rank), its kind still to find: dispatched.
  void failed(elastic::WorkerFailure failure);
  // Finds `failure`'s kind, once the other workers were told to stop (occurrence.hpp).
  void classify(occurred::WorkerFailed& failure);

 private:
  void ended(WorkerProcess& w, int status);
  void add_kind(elastic::WorkerFailure& f, const WorkerProcess* w, bool stopped_by_ddprun,
                bool after_another_failure);

  Context c_;
  HangWatch* hangs_ = nullptr;
  bool open_ = false;                 // workers were started and their round has not ended yet
  long long oom_kills_at_start_ = 0;  // the cgroup's memory_events() when the round's workers started
};

}  // namespace ddprun::launcher
