// The JobCoordinator's rules as tables: each scenario is a list of events, written as short
// commands, with the messages each one must produce, rendered as text.
#include "core/job_coordinator.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sstream>

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
namespace {

using Lines = std::vector<std::string>;

std::string render(const Message& message) {
  if (const auto* a = std::get_if<Assign>(&message)) {
    const RoundAssignment& r = a->assignment;
    return fmt::format("n{} assign round={} restarts={} group={}/{} ranks={}/{} master={}:{}{}{}", a->node, r.round,
                       r.restart_count, r.group_rank, r.group_world_size, r.base_rank, r.world_size, r.master_addr,
                       r.master_port, r.agent_store ? " agent_store" : "",
                       r.backoff > 0 ? fmt::format(" backoff={:g}", r.backoff) : "") +
           (r.quarantined.empty() ? "" : " quarantined=" + r.quarantined.back().node);
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
//          [claims_host] [agent_store] [port=P] [addr=A]
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
    s.run_id = settings_.run_id;
    s.min_nodes = settings_.min_nodes;
    s.max_nodes = settings_.max_nodes;
    s.max_restarts = settings_.max_restarts;
    s.restart = settings_.restart;
    s.heartbeat_interval = settings_.heartbeat_interval;
    s.heartbeat_timeout = settings_.heartbeat_timeout;
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

JobSettings job(int min_nodes, int max_nodes, int max_restarts = 0) {
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

void play(JobSettings settings, const std::vector<Step>& steps) {
  Script script(settings);
  for (const Step& step : steps) {
    CAPTURE(step.command);
    CHECK(script.run(step.command) == step.expect);
  }
}

std::string spare_why(int round, const std::string& nnodes, int place) {
  return fmt::format("rendezvous 'job' runs round {} with its 3 nodes (--nnodes={}); this node waits as spare {} and "
                     "takes the place of a node that is lost",
                     round, nnodes, place);
}
const std::string kSpareOf3 = "rendezvous 'job' runs round 2 with its 3 nodes (--nnodes=2:3); this node waits as spare ";

const std::string kFail2 = "worker rank 20 (local rank 0) on h2 failed with exit code 1";
const std::string kSpent1 = "not restarting: the 1 restarts of --max_restarts are spent";
const std::string kSpent2 = "not restarting: the 2 restarts of --max_restarts are spent";

TEST_CASE("a static job starts when every node has joined, ranks ordered by hostname") {
  play(job(2, 2), {
      {"join 2", {}},
      {"join 1", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
  });
}

TEST_CASE("node_rank is honoured and names the master; nodes may differ in nproc") {
  play(job(3, 3), {
      {"join 1 rank=2 nproc=1", {}},
      {"join 2 rank=0 nproc=4", {}},
      {"join 3 rank=1 nproc=2", {"n2 assign round=1 restarts=0 group=0/3 ranks=0/7 master=10.0.0.2:1002",
                                 "n3 assign round=1 restarts=0 group=1/3 ranks=4/7 master=10.0.0.2:1002",
                                 "n1 assign round=1 restarts=0 group=2/3 ranks=6/7 master=10.0.0.2:1002"}},
  });
}

TEST_CASE("the node of rank 0 decides whether the workers use its launcher's store") {
  play(job(2, 2), {
      {"join 1 rank=1", {}},
      {"join 2 rank=0 agent_store",
       {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002 agent_store",
        "n1 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002 agent_store"}},
  });
  play(job(2, 2), {
      {"join 1 rank=1 agent_store", {}},
      {"join 2 rank=0", {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002",
                         "n1 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002"}},
  });
}

TEST_CASE("a dynamic job starts MIN nodes after the last call, or MAX nodes at once") {
  SUBCASE("last call") {
    Script s(job(2, 4));
    CHECK(s.run("join 1") == Lines{});
    CHECK(s.coordinator().next_deadline() == 600.0);  // the join timeout, while below MIN
    CHECK(s.run("@5 join 2") == Lines{});
    CHECK(s.coordinator().next_deadline() == 35.0);  // MIN reached at 5: last call until 35
    CHECK(s.run("@34.9 tick") == Lines{});
    CHECK(s.run("@35 tick") == Lines{"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                                     "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"});
    CHECK(s.coordinator().next_deadline() == std::nullopt);
  }
  SUBCASE("MAX at once") {
    play(job(1, 2), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
    });
  }
  SUBCASE("a node leaving during the last call ends it") {
    Script s(job(2, 4));
    s.run("join 1");
    s.run("@5 join 2");
    CHECK(s.run("@6 gone 2") == Lines{});
    CHECK(s.coordinator().next_deadline() == 600.0);
    CHECK(s.run("@7 join 3") == Lines{});
    CHECK(s.coordinator().next_deadline() == 37.0);
  }
}

TEST_CASE("the join timeout finishes the job with a message naming what was expected and seen") {
  play(job(3, 3), {
      {"join 1", {}},
      {"join 2", {}},
      {"@599 tick", {}},
      {"@600 tick",
       {"n1 finish exit=69 restarts=0 error=timed out after 600 s waiting for 3 nodes to join round 1 of rendezvous "
        "'job' (have 2: h1 (10.0.0.1), h2 (10.0.0.2)); start the missing nodes or raise --rdzv_conf "
        "join_timeout=SECONDS",
        "n2 finish exit=69 restarts=0 error=timed out after 600 s waiting for 3 nodes to join round 1 of rendezvous "
        "'job' (have 2: h1 (10.0.0.1), h2 (10.0.0.2)); start the missing nodes or raise --rdzv_conf "
        "join_timeout=SECONDS"}},
      {"join 3", {"n3 finish exit=69 restarts=0 error=rendezvous 'job' has already finished; start a new job with "
                  "another --rdzv_id"}},
  });
}

TEST_CASE("a worker failure stops every other node and restarts all within the job-wide budget") {
  play(job(2, 2, /*max_restarts=*/1), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 2 1", {"n1 stop round=1 worker_failed: " + kFail2}},
      {"stopped 1 1", {}},
      {"stopped 2 1", {"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                       "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@20 fail 1 2 exit=7", {"n2 stop round=2 worker_failed: worker rank 10 (local rank 0) on h1 failed with exit "
                               "code 7"}},
      {"stopped 2 2", {}},
      {"stopped 1 2", {"n1 finish exit=7 restarts=1 failure=h1:10:7 stop=" + kSpent1, "n2 finish exit=7 restarts=1 failure=h1:10:7 stop=" + kSpent1}},
  });
}

TEST_CASE("the root cause is the earliest failure on any node, whichever is reported first") {
  play(job(2, 2), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 1 1 exit=2 at=10.5", {"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed "
                                       "with exit code 2"}},
      {"fail 2 1 exit=9 at=10.2", {}},  // raced with the stop: counts, but stops nobody again
      {"stopped 1 1 fail=11:3:10.7", {}},
      {"stopped 2 1", {"n1 finish exit=9 restarts=0 failure=h2:20:9 failure=h1:10:2 failure=h1:11:3",
                       "n2 finish exit=9 restarts=0 failure=h2:20:9 failure=h1:10:2 failure=h1:11:3"}},
  });
}

TEST_CASE("the job's outcome keeps the root cause's traceback only") {
  play(job(2, 2), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 1 1 exit=2 at=10.5 tb", {"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed "
                                          "with exit code 2"}},
      {"stopped 1 1 fail=11:3:10.1:tb", {}},
      {"stopped 2 1 fail=20:9:10.7:tb", {"n1 finish exit=3 restarts=0 failure=h1:11:3:tb failure=h1:10:2 failure=h2:20:9",
                                         "n2 finish exit=3 restarts=0 failure=h1:11:3:tb failure=h1:10:2 failure=h2:20:9"}},
  });
}

TEST_CASE("a lost node stops the others, who go on without it while MIN remain, using no budget") {
  play(job(2, 3), {
      {"join 1", {}},
      {"join 2", {}},
      {"join 3", {"n1 assign round=1 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                  "n3 assign round=1 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
      {"gone 1", {"n2 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection",
                  "n3 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection"}},
      {"stopped 2 1", {}},
      {"stopped 3 1", {"n2 assign round=2 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002",
                       "n3 assign round=2 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002"}},
      {"succeeded 2 2", {}},
      {"succeeded 3 2", {"n2 finish exit=0 restarts=0", "n3 finish exit=0 restarts=0"}},
  });
}

TEST_CASE("below MIN the survivors wait for a replacement, up to the join timeout") {
  SUBCASE("a replacement takes the lost node's rank") {
    play(job(2, 2), {
        {"join 1 rank=0", {}},
        {"join 2 rank=1", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                           "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@10 gone 1", {"n2 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection"}},
        {"stopped 2 1", {}},
        {"@50 join 3 rank=0", {"n3 assign round=2 restarts=0 group=0/2 ranks=0/4 master=10.0.0.3:1003",
                               "n2 assign round=2 restarts=0 group=1/2 ranks=2/4 master=10.0.0.3:1003"}},
    });
  }
  SUBCASE("none comes") {
    play(job(2, 2), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@10 gone 1", {"n2 stop round=1 node_lost: node h1 (10.0.0.1) was lost: it closed the connection"}},
        {"@11 stopped 2 1", {}},
        {"@610 tick", {}},
        {"@611 tick", {"n2 finish exit=69 restarts=0 error=timed out after 600 s waiting for 2 nodes to join round 2 "
                       "of rendezvous 'job' (have 1: h2 (10.0.0.2)); start the missing nodes or raise --rdzv_conf "
                       "join_timeout=SECONDS"}},
    });
  }
}

TEST_CASE("a node joining a running job is admitted in the next round, using no budget") {
  play(job(2, 3), {
      {"join 1", {}},
      {"join 2", {}},
      {"@30 tick", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"join 3", {"n1 stop round=1 membership_change: node h3 (10.0.0.3) joined; admitting it in the next round",
                  "n2 stop round=1 membership_change: node h3 (10.0.0.3) joined; admitting it in the next round"}},
      {"stopped 1 1", {}},
      {"stopped 2 1", {"n1 assign round=2 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                       "n2 assign round=2 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                       "n3 assign round=2 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
      {"join 4", {"n4 spare 1: " + kSpareOf3 + "1 and takes the place of a node that is lost"}},  // full: waits, and replaces the next node lost
      {"gone 2", {"n1 stop round=2 node_lost: node h2 (10.0.0.2) was lost: it closed the connection",
                  "n3 stop round=2 node_lost: node h2 (10.0.0.2) was lost: it closed the connection"}},
      {"stopped 1 2", {}},
      {"stopped 3 2", {"n1 assign round=3 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                       "n3 assign round=3 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                       "n4 assign round=3 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
  });
}

TEST_CASE("hot spares: the earliest joined replaces a lost node in the next round, at full size") {
  JobSettings settings = job(3, 3);
  settings.spares = 2;
  play(settings, {
      {"join 1", {}},
      {"join 2", {}},
      {"join 5", {"n1 assign round=1 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                  "n5 assign round=1 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
      // The order of joining, not the node's name, orders the spares.
      {"join 4", {"n4 spare 1: " + spare_why(1, "3", 1)}},
      {"join 3", {"n3 spare 2: " + spare_why(1, "3", 2)}},
      {"join 6", {"n6 finish exit=69 restarts=0 error=rendezvous 'job' already has its 3 nodes and 2 spares "
                  "(--rdzv_conf spares=2); stop this node or give every node a larger --rdzv_conf spares"}},
      {"gone 3", {}},  // a spare lost: the round goes on
      {"join 3", {"n3 spare 2: " + spare_why(1, "3", 2)}},
      {"@5 gone 2", {"n1 stop round=1 node_lost: node h2 (10.0.0.2) was lost: it closed the connection",
                     "n5 stop round=1 node_lost: node h2 (10.0.0.2) was lost: it closed the connection"}},
      {"@5 stopped 1 1", {}},
      // No last call and no join timeout: the round starts as the last node reports, with the
      // earliest-joined spare, at the same world size; the other spare moves up.
      {"@5 stopped 5 1", {"n1 assign round=2 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                          "n4 assign round=2 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                          "n5 assign round=2 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001",
                          "n3 spare 1: " + spare_why(2, "3", 1)}},
  });
}

TEST_CASE("spares=0 refuses a node beyond MAX; by default any number wait") {
  JobSettings settings = job(1, 2);
  settings.spares = 0;
  play(settings, {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"join 3", {"n3 finish exit=69 restarts=0 error=rendezvous 'job' already has its 2 nodes and 0 spares "
                  "(--rdzv_conf spares=0); stop this node or give every node a larger --rdzv_conf spares"}},
  });
  Script any(job(1, 2));
  any.run("join 1");
  any.run("join 2");
  for (NodeId n = 3; n < 20; ++n) CHECK(any.run(fmt::format("join {}", n)).size() == 1);
}

TEST_CASE("quick joins and leaves are free up to max_membership_changes in a row, then cost restarts") {
  JobSettings settings = job(2, 3, 1);
  settings.max_membership_changes = 2;
  const std::string joined3 = "membership_change: node h3 (10.0.0.3) joined; admitting it in the next round";
  const std::string lost3 = "node_lost: node h3 (10.0.0.3) was lost: it closed the connection";
  SUBCASE("churn spends the budget, then ends the job") {
    play(settings, {
        {"join 1", {}},
        {"join 2", {}},
        {"@30 tick", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                      "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@31 join 3", {"n1 stop round=1 " + joined3, "n2 stop round=1 " + joined3}},
        {"stopped 1 1", {}},
        {"stopped 2 1", {"n1 assign round=2 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                         "n2 assign round=2 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                         "n3 assign round=2 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
        {"@32 gone 3", {"n1 stop round=2 " + lost3, "n2 stop round=2 " + lost3}},
        {"stopped 1 2", {}},
        {"stopped 2 2", {"n1 assign round=3 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                         "n2 assign round=3 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@33 join 3", {"n1 stop round=3 " + joined3, "n2 stop round=3 " + joined3}},
        {"stopped 1 3", {}},
        {"stopped 2 3", {"n1 assign round=4 restarts=1 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                         "n2 assign round=4 restarts=1 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                         "n3 assign round=4 restarts=1 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
        {"@34 gone 3", {"n1 stop round=4 " + lost3, "n2 stop round=4 " + lost3}},
        {"stopped 1 4", {}},
        {"stopped 2 4",
         {"n1 finish exit=69 restarts=1 error=4 rounds in a row ended by nodes joining or leaving within 30 s of their "
          "start (last: node h3 (10.0.0.3) was lost: it closed the connection), more than max_membership_changes=2, "
          "and the 1 restarts of --max_restarts are spent; raise --rdzv_conf max_membership_changes or "
          "--max_restarts",
          "n2 finish exit=69 restarts=1 error=4 rounds in a row ended by nodes joining or leaving within 30 s of their "
          "start (last: node h3 (10.0.0.3) was lost: it closed the connection), more than max_membership_changes=2, "
          "and the 1 restarts of --max_restarts are spent; raise --rdzv_conf max_membership_changes or "
          "--max_restarts"}},
    });
  }
  SUBCASE("a round that ran for the last-call window is progress: the count starts again") {
    play(settings, {
        {"join 1", {}},
        {"join 2", {}},
        {"@30 tick", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                      "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@31 join 3", {"n1 stop round=1 " + joined3, "n2 stop round=1 " + joined3}},
        {"stopped 1 1", {}},
        {"stopped 2 1", {"n1 assign round=2 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                         "n2 assign round=2 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                         "n3 assign round=2 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
        {"@32 gone 3", {"n1 stop round=2 " + lost3, "n2 stop round=2 " + lost3}},
        {"stopped 1 2", {}},
        {"stopped 2 2", {"n1 assign round=3 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                         "n2 assign round=3 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"@100 join 3", {"n1 stop round=3 " + joined3, "n2 stop round=3 " + joined3}},
        {"stopped 1 3", {}},
        {"stopped 2 3", {"n1 assign round=4 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                         "n2 assign round=4 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                         "n3 assign round=4 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
    });
  }
}

TEST_CASE("success needs every node (the exit barrier); a failure elsewhere first restarts all") {
  SUBCASE("barrier") {
    play(job(2, 2), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"succeeded 1 1", {}},
        {"join 3 nnodes=2:2", {"n3 spare 1: rendezvous 'job' runs round 1 with its 2 nodes (--nnodes=2); this node "
                               "waits as spare 1 and takes the place of a node that is lost"}},  // full
        {"succeeded 2 1", {"n1 finish exit=0 restarts=0", "n2 finish exit=0 restarts=0", "n3 finish exit=0 restarts=0"}},
    });
  }
  SUBCASE("failure after another node succeeded") {
    play(job(2, 2, 3), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"succeeded 1 1", {}},
        // n1 has no workers to stop, but may serve the round's store: it must report too.
        {"fail 2 1", {"n1 stop round=1 worker_failed: " + kFail2}},
        {"stopped 2 1", {}},
        {"stopped 1 1", {"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                         "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
    });
  }
  SUBCASE("success that crosses the stop: the node's report of the stop ends its part") {
    play(job(2, 2, 3), {
        {"join 1", {}},
        {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
        {"fail 2 1", {"n1 stop round=1 worker_failed: " + kFail2}},
        {"stopped 2 1", {}},
        {"succeeded 1 1", {}},
        {"stopped 1 1", {"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                         "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
    });
  }
  SUBCASE("a node lost after it succeeded does not stop the others") {
    play(job(2, 3), {
        {"join 1", {}},
        {"join 2", {}},
        {"join 3", {"n1 assign round=1 restarts=0 group=0/3 ranks=0/6 master=10.0.0.1:1001",
                    "n2 assign round=1 restarts=0 group=1/3 ranks=2/6 master=10.0.0.1:1001",
                    "n3 assign round=1 restarts=0 group=2/3 ranks=4/6 master=10.0.0.1:1001"}},
        {"succeeded 3 1", {}},
        {"gone 3", {}},
        {"join 4", {"n4 spare 1: " + spare_why(1, "2:3", 1)}},  // the job is ending: not admitted
        {"succeeded 1 1", {}},
        {"succeeded 2 1", {"n1 finish exit=0 restarts=0", "n2 finish exit=0 restarts=0", "n4 finish exit=0 restarts=0"}},
    });
  }
}

TEST_CASE("a node that does not report its workers stopped within close_timeout ends the job") {
  Script s(job(2, 2));
  s.run("join 1");
  s.run("join 2");
  CHECK(s.run("@100 fail 1 1") == Lines{"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed with "
                                        "exit code 1"});
  CHECK(s.run("stopped 1 1") == Lines{});
  CHECK(s.coordinator().next_deadline() == 160.0);
  const std::string error =
      " restarts=0 error=node h2 (10.0.0.2) did not report its workers stopped within 60 s after round 1 ended (worker "
      "rank 10 (local rank 0) on h1 failed with exit code 1); raise --rdzv_conf close_timeout=SECONDS";
  CHECK(s.run("@160 tick") == Lines{"n1 finish exit=69" + error, "n2 finish exit=69" + error});
}

TEST_CASE("messages about a past round, or from nodes outside the round, change nothing") {
  play(job(1, 1, 2), {
      {"join 1", {"n1 assign round=1 restarts=0 group=0/1 ranks=0/2 master=10.0.0.1:1001"}},
      {"fail 1 1", {}},
      {"stopped 1 1", {"n1 assign round=2 restarts=1 group=0/1 ranks=0/2 master=10.0.0.1:1001"}},
      {"fail 1 1", {}},
      {"stopped 1 1", {}},
      {"succeeded 1 1", {}},
      {"succeeded 9 2", {}},
      {"gone 9", {}},
      {"succeeded 1 2", {"n1 finish exit=0 restarts=1"}},
  });
}

TEST_CASE("nodes that do not fit the job are refused with the flag to fix") {
  struct Case {
    std::string join;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"join 2 run=other", "this rendezvous endpoint serves run 'job', not 'other'; give every node the same --rdzv_id"},
      {"join 2 nnodes=2:4", "this node has --nnodes=2:4 but rendezvous 'job' has --nnodes=3; give every node the same "
                            "--nnodes"},
      {"join 2 max_restarts=5", "this node has --max_restarts=5 but rendezvous 'job' has --max_restarts=0; give every "
                                "node the same --max_restarts"},
      {"join 2 crash_loop_limit=3", "this node has --restart_on=retryable --restart_window=0 --restart_backoff_max=0 "
                                    "--crash_loop_limit=3 but rendezvous 'job' has --restart_on=retryable "
                                    "--restart_window=0 --restart_backoff_max=0 --crash_loop_limit=0; give every node "
                                    "the same restart options"},
      {"join 2 heartbeat_timeout=1.5", "this node has --rdzv_conf heartbeat_interval=0.5,heartbeat_timeout=1.5 but "
                                       "rendezvous 'job' has heartbeat_interval=0.5,heartbeat_timeout=5; give every "
                                       "node the same heartbeat settings"},
      {"join 2 rank=3", "--node_rank=3 is out of range for --nnodes=3 (0 to 2)"},
      {"join 2 rank=1", "--node_rank=1 is already taken by node h1 (10.0.0.1) in rendezvous 'job'; give each node its "
                        "own --node_rank"},
      {"join 2 nproc=0", "--nproc_per_node=0 is out of range (1 to 1048576)"},
      {"join 1", "this node joined twice"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.join);
    Script s(job(3, 3));
    s.run("join 1 rank=1");
    CHECK(s.run(c.join) == Lines{"n" + c.join.substr(5, 1) + " finish exit=69 restarts=0 error=" + c.error});
    // The refused node is not part of the job: two more still start it.
    CHECK(s.run("join 7").empty());
    CHECK(s.run("join 8").size() == 3);
  }
}

TEST_CASE("a --node_rank is free again once its node is gone, and taken again by the next to join") {
  play(job(2, 2), {
      {"join 1 rank=1", {}},
      {"gone 1", {}},
      {"join 2 rank=1", {}},
      {"join 3 rank=1", {"n3 finish exit=69 restarts=0 error=--node_rank=1 is already taken by node h2 (10.0.0.2) in "
                         "rendezvous 'job'; give each node its own --node_rank"}},
      {"join 4 rank=0", {"n4 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.4:1004",
                         "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.4:1004"}},
  });
}

TEST_CASE("many nodes: each event is counted, not found by a walk; the round ends on the last report") {
  constexpr int kNodes = 2000;
  Script s(job(kNodes, kNodes, 1));
  for (int n = 1; n < kNodes; ++n) REQUIRE(s.run(fmt::format("join {} rank={}", n, n - 1)).empty());
  CHECK(s.run(fmt::format("join {} rank={}", kNodes, kNodes - 1)).size() == kNodes);
  // A failure stops every other node; the next round starts with the last report, not before.
  CHECK(s.run("fail 1 1").size() == kNodes - 1);
  for (int n = 1; n < kNodes; ++n) REQUIRE(s.run(fmt::format("stopped {} 1", n)).empty());
  const Lines next = s.run(fmt::format("stopped {} 1", kNodes));
  REQUIRE(next.size() == kNodes);
  CHECK(next.front() == "n1 assign round=2 restarts=1 group=0/2000 ranks=0/4000 master=10.0.0.1:1001");
  // Success only when the last node succeeded.
  for (int n = 1; n < kNodes; ++n) REQUIRE(s.run(fmt::format("succeeded {} 2", n)).empty());
  CHECK(s.run(fmt::format("succeeded {} 2", kNodes)).size() == kNodes);
}

TEST_CASE("only the transport says which node hosts the rendezvous; a peer's claim is refused") {
  const std::string kClaim =
      "error=this node says it hosts the rendezvous, but the rendezvous runs in the launcher of ";
  const std::string kTail = "; a node hosts it only in its own process (give one node alone --rdzv_conf is_host=1, "
                            "or the endpoint's address)";
  struct Case {
    std::string name;
    std::vector<Step> steps;
  };
  const std::vector<Case> cases = {
      {"the host's own node is rank 0 though its hostname sorts last",
       {{"join 9 host", {}},
        {"join 1", {"n9 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.9:1009",
                    "n1 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.9:1009"}}}},
      {"a stranger claiming to host before the host joined: refused, then the job starts",
       {{"join 1 claims_host", {"n1 finish exit=69 restarts=0 " + kClaim + "another node" + kTail}},
        {"join 9 host", {}},
        {"join 2", {"n9 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.9:1009",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.9:1009"}}}},
      {"an insider claiming to host after the host joined: refused, named, and the job goes on",
       {{"join 9 host", {}},
        {"join 1 claims_host", {"n1 finish exit=69 restarts=0 " + kClaim + "h9 (10.0.0.9)" + kTail}},
        {"join 2", {"n9 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.9:1009",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.9:1009"}}}},
      {"a claim with node_rank 0 is refused too: rank 0 is not taken",
       {{"join 9 host rank=1", {}},
        {"join 1 claims_host rank=0", {"n1 finish exit=69 restarts=0 " + kClaim + "h9 (10.0.0.9)" + kTail}},
        {"join 2 rank=0", {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.2:1002",
                           "n9 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.2:1002"}}}},
      {"a second connection of the host is refused",
       {{"join 9 host", {}},
        {"join 8 host",
         {"n8 finish exit=69 restarts=0 error=the rendezvous host joined a second time, while h9 (10.0.0.9) is its "
          "first connection"}}}},
      {"once the host is gone, it may join again",
       {{"join 9 host", {}}, {"gone 9", {}}, {"join 8 host", {}},
        {"join 2", {"n8 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.8:1008",
                    "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.8:1008"}}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    play(job(2, 2), c.steps);
  }
}

TEST_CASE("a peer's fields out of range are refused, one line each, and the job goes on") {
  struct Case {
    std::string join;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"join 1 rank=-2", "--node_rank=-2 is out of range for --nnodes=2 (0 to 1)"},
      {"join 1 rank=2", "--node_rank=2 is out of range for --nnodes=2 (0 to 1)"},
      {"join 1 nproc=0", "--nproc_per_node=0 is out of range (1 to 1048576)"},
      {"join 1 nproc=1048577", "--nproc_per_node=1048577 is out of range (1 to 1048576)"},
      {"join 1 port=0", "this node's MASTER_PORT 0 is not a TCP port (1 to 65535)"},
      {"join 1 port=65536", "this node's MASTER_PORT 65536 is not a TCP port (1 to 65535)"},
      {"join 1 addr=10.0.0.1;reboot", "this node's address '10.0.0.1;reboot' is not a host name or IP address"},
      {"join 1 addr=", "this node's address '' is not a host name or IP address"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.join);
    play(job(2, 2), {{c.join, {"n1 finish exit=69 restarts=0 error=" + c.error}},
                     {"join 2 addr=fe80::1%eth0", {}},
                     {"join 3 addr=node-3.example",
                      {"n2 assign round=1 restarts=0 group=0/2 ranks=0/4 master=fe80::1%eth0:1002",
                       "n3 assign round=1 restarts=0 group=1/2 ranks=2/4 master=fe80::1%eth0:1002"}}});
  }
}

TEST_CASE("the world size never overflows: a node that would make it more than 2^31-1 workers is refused") {
  Script script(job(4096, 4096));
  for (int n = 1; n <= 2047; ++n) REQUIRE(script.run(fmt::format("join {} nproc=1048576", n)).empty());
  CHECK(script.run("join 2048 nproc=1048576") ==
        Lines{"n2048 finish exit=69 restarts=0 error=--nproc_per_node=1048576 would make the job more than "
              "2147483647 workers, with the 2146435072 of the nodes joined"});
  CHECK(script.run("join 2049 nproc=1048575").empty());
}

TEST_CASE("a coordinator elected after another goes on with its rounds and its restart budget") {
  JobSettings settings = job(2, 2, 2);
  settings.rounds_before = 4;  // the etcd rendezvous's next leader, from the job's state key
  settings.restarts_used = 2;
  play(settings, {
      {"join 1", {}},
      {"join 2", {"n1 assign round=5 restarts=2 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=5 restarts=2 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      // The budget is spent: this failure ends the job instead of restarting it.
      {"fail 2 5", {"n1 stop round=5 worker_failed: " + kFail2}},
      {"stopped 1 5", {}},
      {"stopped 2 5", {"n1 finish exit=1 restarts=2 failure=h2:20:1 stop=" + kSpent2,
                       "n2 finish exit=1 restarts=2 failure=h2:20:1 stop=" + kSpent2}},
  });
}

}  // namespace
}  // namespace ddprun::elastic

namespace ddprun::elastic {

TEST_CASE("the restart policy decides once, for every node: not restarting what a restart cannot fix") {
  JobSettings settings = job(2, 2, 100);
  settings.restart = RestartSettings{};
  play(settings, {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@1 fail 2 1 kind=syntax_error noretry", {"n1 stop round=1 worker_failed: " + kFail2}},
      {"stopped 1 1", {}},
      {"stopped 2 1",
       {"n1 finish exit=1 restarts=0 failure=h2:20:1:syntax_error stop=not restarting: rank 20 on h2: syntax_error: "
        "running the same code again cannot fix a syntax_error; --restart_on=any restarts it anyway hopeless",
        "n2 finish exit=1 restarts=0 failure=h2:20:1:syntax_error stop=not restarting: rank 20 on h2: syntax_error: "
        "running the same code again cannot fix a syntax_error; --restart_on=any restarts it anyway hopeless"}},
  });
}

TEST_CASE("a crash loop's backoff: the next round waits, then starts on a tick") {
  JobSettings settings = job(2, 2, 100);
  settings.restart = RestartSettings{};
  settings.restart.crash_loop_limit = 2;
  Script script(settings);
  for (const char* join : {"join 1", "join 2"}) script.run(join);
  CHECK(script.run("@10 fail 1 1 kind=exit_code") == Lines{"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed with exit code 1"});
  script.run("stopped 1 1");
  CHECK(script.run("stopped 2 1").empty());  // waits 1 s
  CHECK(script.coordinator().next_deadline() == 11.0);
  CHECK(script.coordinator().restart_at() == 11.0);
  CHECK(script.run("@10.5 tick").empty());
  CHECK(script.run("@11 tick") == Lines{"n1 assign round=2 restarts=1 group=0/2 ranks=0/4 master=10.0.0.1:1001 backoff=1",
                                        "n2 assign round=2 restarts=1 group=1/2 ranks=2/4 master=10.0.0.1:1001 backoff=1"});
  CHECK_FALSE(script.coordinator().restart_at());
  script.run("@12 fail 2 2 kind=exit_code");
  script.run("stopped 1 2");
  CHECK(script.run("stopped 2 2") ==
        Lines{"n1 finish exit=1 restarts=1 failure=h2:20:1:exit_code stop=crash loop: 2 failures in a row with no "
              "progress since their start (last: rank 20 on h2: exit_code); fix the cause, or raise --crash_loop_limit "
              "(0: never stop) hopeless",
              "n2 finish exit=1 restarts=1 failure=h2:20:1:exit_code stop=crash loop: 2 failures in a row with no "
              "progress since their start (last: rank 20 on h2: exit_code); fix the cause, or raise --crash_loop_limit "
              "(0: never stop) hopeless"});
}

TEST_CASE("a consequence is never the root cause, even when it came first") {
  play(job(2, 2), {
      {"join 1", {}},
      {"join 2", {"n1 assign round=1 restarts=0 group=0/2 ranks=0/4 master=10.0.0.1:1001",
                  "n2 assign round=1 restarts=0 group=1/2 ranks=2/4 master=10.0.0.1:1001"}},
      {"@10 fail 1 1 exit=2 at=10.1 kind=consequence",
       {"n2 stop round=1 worker_failed: worker rank 10 (local rank 0) on h1 failed with exit code 2"}},
      {"stopped 1 1", {}},
      {"stopped 2 1 fail=21:6:10.5 fail=20:1:10.2:consequence",
       {"n1 finish exit=6 restarts=0 failure=h2:21:6 failure=h1:10:2:consequence failure=h2:20:1:consequence",
        "n2 finish exit=6 restarts=0 failure=h2:21:6 failure=h1:10:2:consequence failure=h2:20:1:consequence"}},
  });
}

}  // namespace ddprun::elastic

namespace ddprun::elastic {
namespace {

// Suspect nodes (quarantine.hpp): the root cause of a restarted round counts against its node.
const std::string kQuarantine2 =
    "its workers were the root cause of 2 hardware-like failures within 600 s (segfault, segfault)";

TEST_CASE("quarantine: a node whose worker segfaults twice within the window is left out; the spare takes its place") {
  JobSettings settings = job(3, 3, 5);
  Script script(settings);
  const auto run = [&](const std::string& command) { return script.run(command); };
  CHECK(run("join 1 host").empty());
  CHECK(run("join 2").empty());
  CHECK(run("join 3").size() == 3);
  CHECK(run("join 4") == Lines{"n4 spare 1: " + spare_why(1, "3", 1)});
  CHECK(script.coordinator().membership().spares == std::vector<std::string>{"h4 (10.0.0.4)"});
  // Round 1: n2's worker segfaults; a normal restart, n2 is counted once.
  CHECK(run("@100 fail 2 1 exit=139 kind=segfault").size() == 2);
  CHECK(run("@100 stopped 2 1").empty());
  CHECK(run("@100 stopped 1 1").empty());
  Lines round2 = run("@100 stopped 3 1");
  REQUIRE(round2.size() == 4);
  CHECK(round2[1] == "n2 assign round=2 restarts=1 group=1/3 ranks=2/6 master=10.0.0.1:1001");
  // Round 2: again within the window: n2 gets its own finish (exit 71) and round 3 runs with
  // the spare at full size.
  CHECK(run("@200 fail 2 2 exit=139 kind=segfault").size() == 2);
  CHECK(run("@200 stopped 2 2").empty());
  CHECK(run("@200 stopped 1 2").empty());
  const Lines round3 = run("@200 stopped 3 2");
  CHECK(round3 == Lines{"n2 finish exit=71 restarts=2 failure=h2:20:139:segfault error=this node (h2 (10.0.0.2)) is "
                        "quarantined: " + kQuarantine2 + "; the job goes on without it hopeless",
                        "n1 assign round=3 restarts=2 group=0/3 ranks=0/6 master=10.0.0.1:1001 quarantined=h2 (10.0.0.2)",
                        "n3 assign round=3 restarts=2 group=1/3 ranks=2/6 master=10.0.0.1:1001 quarantined=h2 (10.0.0.2)",
                        "n4 assign round=3 restarts=2 group=2/3 ranks=4/6 master=10.0.0.1:1001 quarantined=h2 (10.0.0.2)"});
  const JobMembership m = script.coordinator().membership();
  CHECK(m.spares.empty());
  REQUIRE(m.quarantined.size() == 1);
  CHECK(m.quarantined[0].node == "h2 (10.0.0.2)");
  CHECK(m.quarantined[0].why == kQuarantine2);
  CHECK(script.coordinator().history().suspects.count(2) == 0);
  // Its connection closing afterwards changes nothing.
  CHECK(run("@201 gone 2").empty());
  // The job's end names it on every node.
  CHECK(run("@300 succeeded 1 3").empty());
  CHECK(run("@300 succeeded 3 3").empty());
  CHECK(run("@300 succeeded 4 3") == Lines{"n1 finish exit=0 restarts=2", "n3 finish exit=0 restarts=2",
                                           "n4 finish exit=0 restarts=2"});
}

// Runs rounds in which `victim`'s worker fails with `kind` at each of `times`; returns the
// messages of the last round's end.
Lines fail_rounds(Script& script, int nodes, int victim, const std::string& kind, const std::vector<int>& times) {
  Lines last;
  int round = 1;
  for (int t : times) {
    script.run(fmt::format("@{} fail {} {} exit=139 kind={}", t, victim, round, kind));
    for (int n = 1; n <= nodes; ++n) last = script.run(fmt::format("@{} stopped {} {}", t, n, round));
    ++round;
  }
  return last;
}

// Nodes 1 (the host) to `nodes` joined, their first round assigned.
void join_all(Script& script, int nodes) {
  script.run("join 1 host");
  for (int n = 2; n <= nodes; ++n) script.run(fmt::format("join {}", n));
}

TEST_CASE("quarantine: not at MIN without a spare, not the host, not outside the window, not a program's own failure") {
  struct Row {
    const char* what;
    int min_nodes;
    int quarantine_after;
    int nodes;  // joined; beyond 3, spares
    int victim;
    const char* kind;
    std::vector<int> times;
  };
  const std::vector<Row> rows = {
      {"at MIN without a spare: a normal restart", 3, 2, 3, 2, "segfault", {100, 200}},
      {"the node that hosts the rendezvous stays", 3, 2, 4, 1, "segfault", {100, 200}},
      {"the failures further apart than the window", 3, 2, 4, 2, "segfault", {100, 800}},
      {"a Python exception is the program's, not the node's", 3, 2, 4, 2, "python_exception", {100, 200}},
      {"quarantine_after=0 turns it off", 3, 0, 4, 2, "segfault", {100, 200}},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    JobSettings settings = job(row.min_nodes, 3, 5);
    settings.quarantine.after = row.quarantine_after;
    Script script(settings);
    join_all(script, row.nodes);
    const Lines last = fail_rounds(script, 3, row.victim, row.kind, row.times);
    CHECK(script.coordinator().membership().quarantined.empty());
    REQUIRE(last.size() == static_cast<std::size_t>(row.nodes));  // the next round's assigns and the spare's word
    for (int n = 0; n < 3; ++n) CHECK(last[n].find(fmt::format("round={}", row.times.size() + 1)) != std::string::npos);
  }
  // At MIN, the restart's reason says the node is suspect and why it is kept.
  Script at_min(job(3, 3, 5));
  join_all(at_min, 3);
  fail_rounds(at_min, 3, 2, "segfault", {100, 200});
  REQUIRE(!at_min.last().empty());
  const auto* assign = std::get_if<Assign>(&at_min.last().front());
  REQUIRE(assign != nullptr);
  CHECK(describe_restart(assign->assignment.restart_reason)
            .find("; node h2 (10.0.0.2) is suspect: " + kQuarantine2 +
                  "; kept, since the job would have 2 nodes without it, fewer than --nnodes MIN 3, and no spare") !=
        std::string::npos);
}

TEST_CASE("quarantine: an elastic job shrinks to MIN without the node") {
  Script script(job(2, 3, 5));
  join_all(script, 3);
  const Lines last = fail_rounds(script, 3, 3, "nccl_error", {100, 200});
  REQUIRE(last.size() == 3);
  CHECK(last[0].rfind("n3 finish exit=71", 0) == 0);
  CHECK(last[1].find("group=0/2") != std::string::npos);
}

TEST_CASE("quarantine: a new coordinator goes on from the history of the last (the etcd leader's state)") {
  JobSettings settings = job(3, 3, 5);
  Script first(settings);
  join_all(first, 4);
  fail_rounds(first, 3, 2, "segfault", {100});
  JobHistory history = first.coordinator().history();
  REQUIRE(history.suspects.count(2) == 1);
  REQUIRE(history.restart);
  CHECK(history.restart->restarts.size() == 1);

  // The next coordinator (a new leader) with the same node ids: one more failure quarantines n2.
  settings.rounds_before = 1;
  settings.restarts_used = 1;
  settings.history = history;
  Script second(settings);
  join_all(second, 4);
  second.run("@200 fail 2 2 exit=139 kind=segfault");
  Lines last;
  for (int n = 1; n <= 3; ++n) last = second.run(fmt::format("@200 stopped {} 2", n));
  REQUIRE(!last.empty());
  CHECK(last[0].rfind("n2 finish exit=71 restarts=2", 0) == 0);
}

}  // namespace
}  // namespace ddprun::elastic
