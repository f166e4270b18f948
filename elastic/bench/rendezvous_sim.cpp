// Simulated nodes for the rendezvous benchmark (scripts/bench/scale.py): N nodes in one process
// that speak to a real ddprun host exactly as real nodes do, because they are built from the
// same parts: each node is a Channel (tcp/channel.hpp: the framing and heartbeats), its join is
// TcpRendezvous's (node_spec() under the same field names), and its answers come from NodeRound
// (core/node_round.hpp), the pure state machine every real node runs. Only the workers are
// simulated: a node's workers start at once on an assignment and stop at once on a stop. No
// secret: the host must run without one (an open rendezvous).
//
//   ddprun_rendezvous_sim HOST:PORT NODES RUN_ID NNODES [--heartbeat=INTERVAL:TIMEOUT] [--fail] [--hold=SECONDS]
//                         [--print-join]
// NNODES is the job's --nnodes (MIN:MAX or N). Connects NODES nodes at once and, once every
// node has its first round or was refused, prints {"event":"refused","nodes":K,"error":"..."}
// if any were, then {"event":"assigned","round":1,"nodes":N,"seconds":S,"reconnects":R} (S
// from the first connect); with --fail it then closes one node's connection (a launcher
// killed) and prints {"event":"reassigned","round":2,...} when every other node has the next
// round (S from the close). --hold=SECONDS then keeps every node connected and idle (heartbeats
// only) that long, between {"event":"holding"} and {"event":"held","seconds":S,"cpu_seconds":C}
// (C: this process's CPU time while holding), so that the host's cost at rest can be measured.
// --print-join prints the join line the first node would send.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <asio.hpp>
#include <nlohmann/json.hpp>

#include "core/node_identity.hpp"
#include "core/node_round.hpp"
#include "core/rendezvous_protocol.hpp"
#include "ddprun/rendezvous_config.hpp"
#include "tcp/channel.hpp"

namespace {

using namespace ddprun::elastic;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

nlohmann::json join_message(const RendezvousConfig& config, const std::string& addr) {
  return {{"type", "join"}, {"version", kProtocolVersion}, {"node", node_spec(config, addr, 1, false)}};
}

class Simulation {
 public:
  Simulation(asio::io_context& io, asio::ip::tcp::endpoint host, int nodes, RendezvousConfig config, bool fail,
             double hold)
      : io_(io), host_(std::move(host)), config_(std::move(config)), fail_(fail), hold_(hold), nodes_(nodes) {}

  void start() {
    start_ = Clock::now();
    for (std::size_t i = 0; i < nodes_.size(); ++i) connect(i);
  }

 private:
  struct Node {
    std::shared_ptr<Channel> channel;
    NodeRound round;
    int assigned = 0;  // the last round assigned
    bool gone = false;
    double retry = 0.01;  // seconds before connecting again
  };

  // Each node from its own loopback address (127.1.0.1, 127.1.0.2, ...), as nodes are separate
  // hosts: thousands of connections from one address to one port make the kernel's search for a
  // free source port a walk of all of them (the simulator, not the host, was then the
  // bottleneck).
  void connect(std::size_t i) {
    auto socket = std::make_shared<asio::ip::tcp::socket>(io_, asio::ip::tcp::v4());
    const auto source = asio::ip::address_v4((127u << 24) | (1u << 16) | static_cast<unsigned>(i + 1));
    asio::error_code bind_error;
    socket->bind({source, 0}, bind_error);
    if (bind_error) {
      std::cerr << "rendezvous_sim: node " << i << " could not bind " << source << ": " << bind_error.message() << "\n";
      std::exit(1);
    }
    socket->async_connect(host_, [this, i, socket](const asio::error_code& ec) {
      if (ec) {
        std::cerr << "rendezvous_sim: node " << i << " could not connect: " << ec.message() << "\n";
        std::exit(1);
      }
      Node& node = nodes_[i];
      node.channel = std::make_shared<Channel>(std::move(*socket), config_.timeouts, "host");
      node.channel->start([this, i](const nlohmann::json& message) { on_message(i, message); },
                          [this, i](const std::string& why) { on_closed(i, why); });
      apply(i, node.round.joined());
      node.channel->send(join_message(config_, node.channel->local_endpoint().address().to_string()));
    });
  }

  // As NodeRendezvous::handle_message.
  void on_message(std::size_t i, const nlohmann::json& message) {
    Node& node = nodes_[i];
    const std::string type = message.at("type");
    if (type == "assign") {
      apply(i, node.round.assign(message.at("assignment").get<RoundAssignment>()));
    } else if (type == "stop") {
      apply(i, node.round.stop(message.at("round"), parse_stop_reason(message.at("reason").get<std::string>()),
                               message.at("why")));
    } else if (type == "finish") {
      apply(i, node.round.end(message.at("outcome").get<JobOutcome>()));
    }
  }

  // As TcpRendezvous: closed before the first round (the host made room, or refused more than
  // it explains at once), connect again, 10 ms later, then twice as long each time up to 1 s.
  void on_closed(std::size_t i, const std::string& why) {
    Node& node = nodes_[i];
    if (node.gone) return;
    if (!node.round.had_round() && node.round.state() != NodeRound::State::kDone) {
      apply(i, node.round.rejoining());
      ++reconnects_[why];
      auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::duration_cast<Clock::duration>(
                                                                 std::chrono::duration<double>(node.retry)));
      node.retry = std::min(node.retry * 2, 1.0);
      timer->async_wait([this, i, timer](const asio::error_code&) { connect(i); });
      return;
    }
    node.gone = true;
    if (node.round.state() != NodeRound::State::kDone) {
      std::cerr << "rendezvous_sim: node " << i << " lost the host: it " << why << "\n";
      std::exit(1);
    }
  }

  void apply(std::size_t i, const NodeRound::Actions& actions) {
    Node& node = nodes_[i];
    for (const NodeRound::Action& action : actions) {
      if (const auto* start = std::get_if<NodeRound::StartWorkers>(&action)) {
        node.assigned = start->assignment.round;
        assigned(start->assignment.round);
      } else if (std::holds_alternative<NodeRound::StopWorkers>(action)) {
        apply(i, node.round.workers_stopped(node.round.round(), {}));  // the workers stop at once
      } else if (const auto* report = std::get_if<NodeRound::Report>(&action)) {
        node.channel->send(report->message);
      } else if (const auto* finish = std::get_if<NodeRound::Finish>(&action)) {
        finished(i, finish->outcome);
      }
    }
  }

  void assigned(int round) {
    ++assigned_[round];
    if (round == first_round_) return settled();
    if (!failed_ || round != first_round_ + 1) {
      std::cerr << "rendezvous_sim: the host started round " << round << ", which this simulation did not cause: a node "
                << "was lost (silent for heartbeat_timeout), or joined late after the host closed its first connection "
                << "(not joined within auth_timeout); connections closed before their join: "
                << nlohmann::json(reconnects_).dump() << "; is the machine too loaded for this many nodes?\n";
      std::exit(1);
    }
    if (assigned_[round] < assigned_[first_round_] - 1) return;
    print({{"event", "reassigned"}, {"round", round}, {"nodes", assigned_[round]}, {"seconds", since(failed_at_)}});
    done();
  }

  // Every node has its first round or was refused.
  void settled() {
    if (assigned_[first_round_] + refused_ < static_cast<int>(nodes_.size())) return;
    if (refused_ > 0) print({{"event", "refused"}, {"nodes", refused_}, {"error", first_refusal_}});
    print({{"event", "assigned"},
           {"round", first_round_},
           {"nodes", assigned_[first_round_]},
           {"seconds", since(start_)},
           {"reconnects", reconnects_}});
    if (fail_ && assigned_[first_round_] > 0) {
      failed_ = true;
      failed_at_ = Clock::now();
      for (Node& node : nodes_) {
        if (node.assigned != first_round_) continue;
        node.gone = true;
        node.channel->close();  // as a launcher that was killed
        break;
      }
    } else {
      done();
    }
  }

  void finished(std::size_t i, const JobOutcome& outcome) {
    Node& node = nodes_[i];
    node.gone = true;
    node.channel->close();
    if (node.assigned == 0) {
      if (refused_++ == 0) first_refusal_ = outcome.error;
      settled();
    }
  }

  void done() {
    if (hold_ > 0 && !holding_) return hold();
    std::cout.flush();
    std::exit(0);
  }

  void hold() {
    holding_ = true;
    print({{"event", "holding"}});
    const double cpu = cpu_seconds();
    auto timer = std::make_shared<asio::steady_timer>(
        io_, std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(hold_)));
    timer->async_wait([this, timer, cpu](const asio::error_code&) {
      print({{"event", "held"}, {"seconds", hold_}, {"cpu_seconds", cpu_seconds() - cpu}});
      done();
    });
  }

  static double cpu_seconds() {
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
  }

  static void print(const nlohmann::json& line) { std::cout << line.dump() << std::endl; }

  asio::io_context& io_;
  asio::ip::tcp::endpoint host_;
  RendezvousConfig config_;
  bool fail_;
  double hold_;  // seconds to stay connected once measured (--hold)
  bool holding_ = false;
  bool failed_ = false;  // one node's connection was closed on purpose
  std::vector<Node> nodes_;
  Clock::time_point start_, failed_at_;
  std::map<int, int> assigned_;
  const int first_round_ = 1;
  int refused_ = 0;
  std::map<std::string, int> reconnects_;  // why the host closed a connection before its join
  std::string first_refusal_;
};

int usage() {
  std::cerr << "usage: ddprun_rendezvous_sim HOST:PORT NODES RUN_ID NNODES [--heartbeat=INTERVAL:TIMEOUT] [--fail] "
               "[--hold=SECONDS] [--print-join]\n";
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return usage();
  bool fail = false, print_join = false;
  double hold = 0;
  RendezvousTimeouts timeouts;
  for (int i = 5; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag.rfind("--heartbeat=", 0) == 0) {  // INTERVAL:TIMEOUT, the job's --rdzv_conf heartbeat_*
      const std::string value = flag.substr(12);
      timeouts.heartbeat_interval = std::stod(value.substr(0, value.find(':')));
      timeouts.heartbeat_timeout = std::stod(value.substr(value.find(':') + 1));
    } else if (flag.rfind("--hold=", 0) == 0) {
      hold = std::stod(flag.substr(7));
    } else if (flag == "--fail") {
      fail = true;
    } else if (flag == "--print-join") {
      print_join = true;
    } else {
      return usage();
    }
  }
  const Endpoint endpoint = parse_endpoint(argv[1], 0);
  const int nodes = std::stoi(argv[2]);
  RendezvousConfig config;
  config.backend = Backend::kC10d;
  config.endpoint = argv[1];
  config.run_id = argv[3];
  config.timeouts = timeouts;
  const std::string nnodes = argv[4];
  const auto colon = nnodes.find(':');
  config.min_nodes = std::stoi(nnodes.substr(0, colon));
  config.max_nodes = colon == std::string::npos ? config.min_nodes : std::stoi(nnodes.substr(colon + 1));
  if (print_join) {
    std::cout << join_message(config, "127.0.0.1").dump() << "\n";
    return 0;
  }
  struct rlimit files {};  // one descriptor a node
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  asio::io_context io;
  Simulation simulation(io, {asio::ip::make_address(endpoint.host), static_cast<unsigned short>(endpoint.port)}, nodes,
                        config, fail, hold);
  simulation.start();
  io.run();
  return 0;
}
