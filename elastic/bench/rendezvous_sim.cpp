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
// if any were, then {"event":"assigned","round":1,"nodes":N,"seconds":S,"joins_sent_seconds":J,
// "reconnects":R} (S from the first connect, J when the last node's join was sent); with --fail it then closes one node's connection (a launcher
// killed) and prints {"event":"reassigned","round":2,...} when every other node has the next
// round (S from the close). --hold=SECONDS then keeps every node connected and idle (heartbeats
// only) that long, between {"event":"holding"} and {"event":"held","seconds":S,"cpu_seconds":C}
// (C: this process's CPU time while holding), so that the host's cost at rest can be measured.
// --print-join prints the join line the first node would send.
//
// What the simulator itself costs counts: it shares the host's cores, so its CPU a node is
// taken from the host's under load. So each node's join line is the first node's with its own
// address put in (checked at start against the line made as TcpRendezvous makes it), its address
// is the one it bound, and its join is sent as soon as connect() returns, as a real node sends it
// once connected (on loopback the handshake is done by then; else the write waits for it).
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <map>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
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

// Every node's join line, made once: the nodes' lines differ only in their address, a JSON string
// that an IPv4 address fills without escapes.
class JoinLines {
 public:
  explicit JoinLines(const RendezvousConfig& config) {
    constexpr std::string_view kMark = "0.0.0.0";
    const std::string text = wire_text(join_message(config, std::string(kMark)));
    const std::string field = R"("addr":")" + std::string(kMark) + '"';
    const std::size_t at = text.find(field);
    if (at == std::string::npos) throw std::logic_error("the join line has no \"addr\" field: " + text);
    head_ = text.substr(0, at + field.size() - kMark.size() - 1);
    tail_ = text.substr(at + field.size() - 1);
  }
  std::string line(const std::string& addr) const { return head_ + addr + tail_; }

 private:
  std::string head_, tail_;
};

class Simulation {
 public:
  Simulation(asio::io_context& io, asio::ip::tcp::endpoint host, int nodes, RendezvousConfig config, bool fail,
             double hold)
      : io_(io),
        host_(std::move(host)),
        config_(std::move(config)),
        join_lines_(config_),
        fail_(fail),
        hold_(hold),
        nodes_(nodes) {
    const std::string first = source(0).to_string();
    if (join_lines_.line(first) != wire_text(join_message(config_, first))) {
      std::cerr << "rendezvous_sim: the join line made once differs from a real node's: " << join_lines_.line(first)
                << "\n";
      std::exit(1);
    }
  }

  // Every node's socket is made and bound before the clock starts: 9,999 machines would do that
  // each on its own, and here it was a tenth of the simulator's loop of connects.
  void start() {
    std::vector<asio::ip::tcp::socket> sockets;
    sockets.reserve(nodes_.size());
    for (std::size_t i = 0; i < nodes_.size(); ++i) sockets.push_back(open_socket(i));
    start_ = Clock::now();
    for (std::size_t i = 0; i < nodes_.size(); ++i) connect(i, std::move(sockets[i]));
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
  static asio::ip::address_v4 source(std::size_t i) {
    return asio::ip::address_v4((127u << 24) | (1u << 16) | static_cast<unsigned>(i + 1));
  }

  asio::ip::tcp::socket open_socket(std::size_t i) {
    asio::ip::tcp::socket socket(io_, asio::ip::tcp::v4());
    asio::error_code error;
    socket.bind({source(i), 0}, error);
    if (!error) socket.non_blocking(true, error);
    if (error) {
      std::cerr << "rendezvous_sim: node " << i << " could not bind " << source(i) << ": " << error.message() << "\n";
      std::exit(1);
    }
    return socket;
  }

  void connect(std::size_t i, asio::ip::tcp::socket socket) {
    // Not connected yet when connect() says EINPROGRESS: the join then waits in the Channel
    // until the socket is writable, and a connection refused then closes the channel.
    if (::connect(socket.native_handle(), host_.data(), static_cast<socklen_t>(host_.size())) != 0 &&
        errno != EINPROGRESS) {
      std::cerr << "rendezvous_sim: node " << i << " could not connect: " << std::strerror(errno) << "\n";
      std::exit(1);
    }
    Node& node = nodes_[i];
    node.channel = std::make_shared<Channel>(std::move(socket), config_.timeouts, "host");
    node.channel->start([this, i](const nlohmann::json& message) { on_message(i, message); },
                        [this, i](const std::string& why) { on_closed(i, why); });
    apply(i, node.round.joined());
    node.channel->send_line(join_lines_.line(source(i).to_string()));
    if (++joins_sent_ == nodes_.size()) last_join_ = Clock::now();
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
      timer->async_wait([this, i, timer](const asio::error_code&) { connect(i, open_socket(i)); });
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
           {"joins_sent_seconds", std::chrono::duration<double>(last_join_ - start_).count()},
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
  JoinLines join_lines_;
  bool fail_;
  double hold_;  // seconds to stay connected once measured (--hold)
  bool holding_ = false;
  bool failed_ = false;  // one node's connection was closed on purpose
  std::vector<Node> nodes_;
  Clock::time_point start_, failed_at_;
  std::size_t joins_sent_ = 0;   // by nodes' first connects and reconnects
  Clock::time_point last_join_;  // when the last of the nodes' first joins was sent
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
    std::cout << JoinLines(config).line("127.0.0.1") << "\n";
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
