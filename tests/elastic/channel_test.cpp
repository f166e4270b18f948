// The rendezvous host's heartbeat rule (tcp/channel.hpp): how long it may stay silent before it
// answers a node's heartbeat, so that the node hears from it at least every heartbeat_timeout/3.
#include "tcp/channel.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::elastic {
namespace {

TEST_CASE("the host answers a heartbeat once silent for heartbeat_timeout/3 less the node's interval") {
  struct Row {
    double interval, timeout, answer_after;
  };
  for (const Row& row : {Row{0.5, 5, 5.0 / 3 - 0.5},   // the defaults: an answer every third heartbeat
                         Row{2, 20, 20.0 / 3 - 2},     // --heartbeat 2:20
                         Row{0.25, 2, 2.0 / 3 - 0.25},  // the scenarios' heartbeat_timeout=2
                         Row{5.0 / 3, 5, 0},           // interval = timeout/3: every heartbeat answered
                         Row{2.5, 5, 0}}) {            // the longest interval validate() allows: every one
    RendezvousTimeouts timeouts;
    timeouts.heartbeat_interval = row.interval;
    timeouts.heartbeat_timeout = row.timeout;
    CAPTURE(row.interval);
    CAPTURE(row.timeout);
    CHECK(heartbeat_answer_after(timeouts) == doctest::Approx(row.answer_after));
    // The node's next heartbeat after that comes within one interval: the host is heard from
    // within timeout/3, or within one interval when that is longer, and so within the timeout.
    CHECK(heartbeat_answer_after(timeouts) + row.interval <= std::max(row.timeout / 3, row.interval) + 1e-9);
  }
}

// A node and a host on loopback: the host's answers name the node's heartbeats, and the node
// learns when it sent each one acknowledged (its fence rests on it). The host acknowledges
// at least every heartbeat_answer_after + interval; nothing is acknowledged that was not sent.
TEST_CASE("the host's answers acknowledge the node's numbered heartbeats, in order, and as often as the rule says") {
  using Clock = std::chrono::steady_clock;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::address_v4::loopback(), 0});
  asio::ip::tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  asio::ip::tcp::socket accepted = acceptor.accept();
  RendezvousTimeouts timeouts;
  timeouts.heartbeat_interval = 0.02;
  timeouts.heartbeat_timeout = 0.3;  // the host answers once it acknowledged nothing for 0.08 s
  auto host = std::make_shared<Channel>(std::move(accepted), timeouts, "node");
  auto node = std::make_shared<Channel>(std::move(client), timeouts, "host");
  host->answer_heartbeats();
  const Clock::time_point started = Clock::now();
  std::vector<std::pair<Clock::time_point, Clock::time_point>> acks;  // (sent at, heard at)
  node->on_acknowledged([&](Clock::time_point sent_at) {
    acks.emplace_back(sent_at, Clock::now());
    if (acks.size() == 5) io.stop();
  });
  std::string closed;
  host->start([](const nlohmann::json&) {}, [&](const std::string& why) { closed = "host: " + why; });
  node->start([](const nlohmann::json&) {}, [&](const std::string& why) { closed = "node: " + why; });
  io.run_for(std::chrono::seconds(30));  // ends at the fifth acknowledgement
  host->close();
  node->close();
  CHECK(closed == "");
  REQUIRE(acks.size() == 5);
  for (std::size_t i = 0; i < acks.size(); ++i) {
    CAPTURE(i);
    CHECK(acks[i].first >= started);
    CHECK(acks[i].first <= acks[i].second);
    if (i > 0) CHECK(acks[i].first > acks[i - 1].first);  // only later heartbeats move the fence
  }
}

// A node that leaves (a quarantine's reason) closes its channel, and ddprun its loop, only once
// what it queued is written: when_sent() waits for writes still in flight, here 16 MiB that no
// socket buffer takes at once, and the host reads every message, the last one too.
TEST_CASE("when_sent: called once everything queued is written; closing then loses nothing") {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::address_v4::loopback(), 0});
  asio::ip::tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  asio::ip::tcp::socket accepted = acceptor.accept();
  RendezvousTimeouts timeouts;
  auto host = std::make_shared<Channel>(std::move(accepted), timeouts, "node");
  auto node = std::make_shared<Channel>(std::move(client), timeouts, "host");
  int bulk = 0;
  bool last = false;
  bool sent = false;
  std::string closed;
  host->start(
      [&](const nlohmann::json& message) {
        if (message.at("type") == "bulk") ++bulk;
        if (message.at("type") == "last") {
          last = true;
          if (sent) io.stop();  // the host may read the last line before the node hears its write ended
        }
      },
      [&](const std::string& why) { closed = why; });
  node->start([](const nlohmann::json&) {}, [](const std::string&) {});
  const std::string data(64 * 1024, 'x');
  for (int i = 0; i < 256; ++i) node->send({{"type", "bulk"}, {"data", data}});
  node->send({{"type", "last"}});
  node->when_sent([&] {
    sent = true;
    node->close();  // as a leaving ddprun's exit does
    if (last) io.stop();
  });
  CHECK_FALSE(sent);  // 16 MiB are not written at once
  io.run_for(std::chrono::seconds(60));
  CHECK(sent);
  CHECK(bulk == 256);
  CHECK(last);
  host->close();
  // Nothing in flight: at once.
  bool at_once = false;
  node->when_sent([&] { at_once = true; });
  CHECK(at_once);
}

}  // namespace
}  // namespace ddprun::elastic
