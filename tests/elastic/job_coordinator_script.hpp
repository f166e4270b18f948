// The JobCoordinator's rules as tables (job_coordinator_*_test.cpp): each scenario is a list of
// events, written as short commands, with the messages each one must produce, rendered as text.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/job_coordinator.hpp"
#include "ddprun/failure_text.hpp"

namespace doctest {
template <>
struct StringMaker<std::vector<std::string>> {
  static String convert(const std::vector<std::string>& lines) {
    std::string text = "{";
    for (const std::string& line : lines) text += "\n  \"" + line + "\"";
    return (text + "}").c_str();
  }
};
}  // namespace doctest

namespace ddprun::elastic {

using Lines = std::vector<std::string>;

// " ring=a1@10.0.0.1:2001,..." for a round's snapshot replicators; "" for none.
inline std::string ring(const std::vector<SnapshotPeer>& peers) {
  std::string out;
  for (const SnapshotPeer& p : peers) out += fmt::format("{}{}@{}:{}", out.empty() ? " ring=" : ",", p.node, p.addr, p.port);
  return out;
}

inline std::string render(const Message& message) {
  if (const auto* a = std::get_if<Assign>(&message)) {
    const RoundAssignment& r = a->assignment;
    return fmt::format("n{} assign round={} restarts={} group={}/{} ranks={}/{} master={}:{}{}{}", a->node, r.round,
                       r.restart_count, r.group_rank, r.group_world_size, r.base_rank, r.world_size, r.master_addr,
                       r.master_port, r.agent_store ? " agent_store" : "",
                       r.backoff > 0 ? fmt::format(" backoff={:g}", r.backoff) : "") +
           (r.quarantined.empty() ? "" : " quarantined=" + r.quarantined.back().node) + ring(r.snapshot_peers);
  }
  if (const auto* s = std::get_if<Stop>(&message)) {
    return fmt::format("n{} stop round={} {}: {}", s->node, s->round, to_string(s->reason), s->why);
  }
  if (const auto* p = std::get_if<Spare>(&message)) return fmt::format("n{} spare {}: {}", p->node, p->place, p->why);
  const auto& f = std::get<Finish>(message);
  std::string line = fmt::format("n{} finish exit={} restarts={}", f.node, f.outcome.exit_code, f.outcome.restarts);
  for (const WorkerFailure& w : f.outcome.failures) {
    line += fmt::format(" failure={}:{}:{}{}{}", w.host, w.rank, w.exit_code, w.traceback.empty() ? "" : ":tb",
                        w.kind.empty() ? "" : ":" + w.kind.name());
  }
  if (!f.outcome.error.empty()) line += " error=" + f.outcome.error;
  if (!f.outcome.stop_reason.empty()) line += " stop=" + f.outcome.stop_reason;
  if (!f.outcome.failures.empty() && !f.outcome.retryable) line += " hopeless";  // retryable: false
  return line;
}

// Commands, each optionally prefixed by "@SECONDS" (the clock; it only moves forward):
//   join N [rank=R] [nproc=P] [run=ID] [nnodes=MIN:MAX] [max_restarts=K] [crash_loop_limit=L]
//          [heartbeat_timeout=S] [host]
//          [claims_host] [agent_store] [snap] [port=P] [addr=A]
//        host: the transport knows N as the launcher the coordinator runs in (Joiner::kHost),
//        and N says so; claims_host: N says it hosts, the transport does not know it so
//   fail N ROUND [exit=E] [at=T] [rank=R] [tb] [kind=K] [noretry] [progress]
//                                                  worker_failed (tb: with a traceback)
//   stopped N ROUND [fail=RANK:EXIT:AT[:tb][:consequence]]...    workers_stopped
//   succeeded N ROUND
//   gone N
//   tick
// Node N defaults: hostname hN, addr 10.0.0.N, master_port 1000+N, nproc 2, the job's settings.
class Script {
 public:
  explicit Script(JobSettings settings) : settings_(settings), coordinator_(settings, 0) {}

  Lines run(const std::string& command) {
    std::istringstream in(command);
    std::string word;
    in >> word;
    if (word[0] == '@') {
      now_ = std::stod(word.substr(1));
      in >> word;
    }
    Messages out;
    if (word == "tick") {
      out = coordinator_.tick(now_);
    } else {
      NodeId node = 0;
      in >> node;
      if (word == "join") {
        const NodeSpec joining = spec(node, in);
        out = coordinator_.join(node, joining, host_ ? Joiner::kHost : Joiner::kPeer, now_);
      } else if (word == "fail") {
        int round = 0;
        in >> round;
        WorkerFailure failure = worker(node);
        for (std::string option; in >> option;) apply(failure, option);
        out = coordinator_.worker_failed(node, round, failure, now_);
      } else if (word == "stopped") {
        int round = 0;
        in >> round;
        std::vector<WorkerFailure> failures;
        for (std::string option; in >> option;) {
          WorkerFailure failure = worker(node);
          std::sscanf(option.c_str(), "fail=%d:%d:%lf", &failure.rank, &failure.exit_code, &failure.timestamp);
          if (option.size() > 3 && option.compare(option.size() - 3, 3, ":tb") == 0) failure.traceback = "tb";
          if (option.find(":consequence") != std::string::npos) failure.kind = FailureKind::kConsequence;
          failures.push_back(failure);
        }
        out = coordinator_.workers_stopped(node, round, failures, now_);
      } else if (word == "succeeded") {
        int round = 0;
        in >> round;
        out = coordinator_.workers_succeeded(node, round, now_);
      } else if (word == "gone") {
        out = coordinator_.node_gone(node, "it closed the connection", now_);
      } else {
        FAIL("unknown command " << command);
      }
    }
    Lines lines;
    for (const Message& m : out) lines.push_back(render(m));
    last_ = std::move(out);
    return lines;
  }

  const JobCoordinator& coordinator() const { return coordinator_; }
  const Messages& last() const { return last_; }  // the last command's messages, unrendered

 private:
  NodeSpec spec(NodeId node, std::istringstream& in) {
    host_ = false;
    NodeSpec s;
    static_cast<SharedSettings&>(s) = settings_;
    s.nproc = 2;
    s.addr = fmt::format("10.0.0.{}", node);
    s.hostname = fmt::format("h{}", node);
    s.master_port = 1000 + static_cast<int>(node);
    for (std::string option; in >> option;) {
      std::sscanf(option.c_str(), "rank=%d", &s.node_rank);
      std::sscanf(option.c_str(), "nproc=%d", &s.nproc);
      std::sscanf(option.c_str(), "nnodes=%d:%d", &s.min_nodes, &s.max_nodes);
      std::sscanf(option.c_str(), "max_restarts=%d", &s.max_restarts);
      std::sscanf(option.c_str(), "crash_loop_limit=%d", &s.restart.crash_loop_limit);
      std::sscanf(option.c_str(), "heartbeat_timeout=%lf", &s.heartbeat_timeout);
      std::sscanf(option.c_str(), "port=%d", &s.master_port);
      if (option.rfind("run=", 0) == 0) s.run_id = option.substr(4);
      if (option.rfind("addr=", 0) == 0) s.addr = option.substr(5);
      if (option == "host") host_ = s.hosts_rendezvous = true;
      if (option == "claims_host") s.hosts_rendezvous = true;
      if (option == "agent_store") s.agent_store = true;
      if (option == "snap") {  // a snapshot replicator, "a<node>" on port 2000 + node
        s.snapshot_node = fmt::format("a{}", node);
        s.snapshot_port = 2000 + static_cast<int>(node);
      }
    }
    return s;
  }

  WorkerFailure worker(NodeId node) const {
    WorkerFailure f;
    f.rank = static_cast<int>(node) * 10;
    f.local_rank = 0;
    f.exit_code = 1;
    f.timestamp = now_;
    return f;
  }

  static void apply(WorkerFailure& f, const std::string& option) {
    std::sscanf(option.c_str(), "exit=%d", &f.exit_code);
    std::sscanf(option.c_str(), "at=%lf", &f.timestamp);
    std::sscanf(option.c_str(), "rank=%d", &f.rank);
    if (option == "tb") f.traceback = "tb";
    if (option.rfind("kind=", 0) == 0) f.kind = FailureKindName::parse(option.substr(5)).value();
    if (option == "noretry") f.retryable = false;
    if (option == "progress") f.progressed = true;
  }

  JobSettings settings_;
  JobCoordinator coordinator_;
  double now_ = 0;
  Messages last_;
  bool host_ = false;  // the node of the join being read is the host's own (option host)
};

struct Step {
  std::string command;
  Lines expect;
};

inline JobSettings job(int min_nodes, int max_nodes, int max_restarts = 0) {
  JobSettings s;
  s.run_id = "job";
  s.min_nodes = min_nodes;
  s.max_nodes = max_nodes;
  s.max_restarts = max_restarts;
  s.join_timeout = 600;
  s.last_call_timeout = 30;
  s.close_timeout = 60;
  // The restart policy's backoff and crash loop have their own scenarios below; the rest run
  // without them, so that a restart follows at once.
  s.restart.backoff_max = 0;
  s.restart.crash_loop_limit = 0;
  return s;
}

// Runs each step's command on `script`, checking its messages; a scenario may go on from there.
inline void play(Script& script, const std::vector<Step>& steps) {
  for (const Step& step : steps) {
    CAPTURE(step.command);
    CHECK(script.run(step.command) == step.expect);
  }
}

inline void play(JobSettings settings, const std::vector<Step>& steps) {
  Script script(settings);
  play(script, steps);
}

inline std::string spare_why(int round, const std::string& nnodes, int place) {
  return fmt::format("rendezvous 'job' runs round {} with its 3 nodes (--nnodes={}); this node waits as spare {} and "
                     "takes the place of a node that is lost",
                     round, nnodes, place);
}
inline const std::string kSpareOf3 = "rendezvous 'job' runs round 2 with its 3 nodes (--nnodes=2:3); this node waits as spare ";

inline const std::string kFail2 = "worker rank 20 (local rank 0) on h2 failed with exit code 1";
inline const std::string kSpent1 = "not restarting: the 1 restarts of --max_restarts are spent";
inline const std::string kSpent2 = "not restarting: the 2 restarts of --max_restarts are spent";

}  // namespace ddprun::elastic
