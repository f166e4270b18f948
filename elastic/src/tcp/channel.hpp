// One rendezvous connection: newline-delimited JSON messages over TCP, with heartbeats both
// ways. Used by both ends (RendezvousServer and TcpRendezvous). Once authenticate() is called,
// every line in both directions carries a tag (rendezvous_auth.hpp).
//
// Heartbeats: a node sends one every heartbeat_interval, numbered; the host only answers them,
// when it has acknowledged none for a while (answer_heartbeats()), naming the last it received,
// so that each side still hears from the other well within heartbeat_timeout while the host of
// 10,000 nodes sends a few thousand heartbeats a second instead of 20,000 (and runs no
// heartbeat timer per node). The node learns from each answer when it sent the heartbeat
// acknowledged (on_acknowledged()), which its fence rests on (core/fence.hpp).
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous_config.hpp"
#include "auth/rendezvous_auth.hpp"
#include "core/fence.hpp"
#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic {

// How long the side that answers heartbeats (Channel::answer_heartbeats) may stay silent before
// it answers the peer's next heartbeat: with those every heartbeat_interval, it is heard from at
// least every heartbeat_timeout / 3, and at every heartbeat when the interval is longer than that.
double heartbeat_answer_after(const RendezvousTimeouts& timeouts);

class Channel : public std::enable_shared_from_this<Channel> {
 public:
  using OnMessage = std::function<void(const nlohmann::json& message)>;
  using OnClosed = std::function<void(const std::string& why)>;

  // Whether the channel sets TCP_NODELAY on its socket (a failure must reach the others at
  // once), or the socket has it already: accepted from a listener that has it (Linux passes it on
  // to the accepted socket, which saves the host of 10,000 nodes as many system calls).
  enum class NoDelay { kSet, kInherited };

  // `peer` names the other end in messages. The socket must be connected.
  Channel(asio::ip::tcp::socket socket, const RendezvousTimeouts& timeouts, std::string peer,
          NoDelay no_delay = NoDelay::kSet);

  // Starts reading and heartbeats. on_message gets every message but heartbeats; on_closed is
  // called once, when the peer closed the connection, sent something unreadable, or was silent
  // for heartbeat_timeout; `why` says which. Neither is called after close().
  void start(OnMessage on_message, OnClosed on_closed);
  // From now on, seals every message sent and opens every line received with `auth`; a line
  // that fails closes the channel (on_closed). Call it from on_message, between two lines.
  void authenticate(MessageAuth auth);
  bool authenticated() const { return auth_.has_value(); }
  // Sends no heartbeats until authenticate(): an untagged one could otherwise cross the
  // peer's switch to tagged lines. Call before start().
  void hold_heartbeats_until_authenticated() { heartbeats_held_ = true; }
  // Sends no heartbeat on its own: answers a heartbeat of the peer with an acknowledgement of
  // the last one received when this end has acknowledged none for
  // heartbeat_answer_after(timeouts), so that the peer, which sends one every
  // heartbeat_interval, has one at least every heartbeat_timeout / 3 (every interval when that
  // is longer). Other messages are not answered so: a broadcast's replies must not double the
  // host's sends. The rendezvous host's side. Call before start().
  void answer_heartbeats() { answer_heartbeats_ = true; }
  // The side that sends heartbeats: `handler` is called with the moment this end sent the
  // heartbeat that the peer's answer acknowledges, each time that moment moves later. Call
  // before start().
  void on_acknowledged(std::function<void(std::chrono::steady_clock::time_point sent_at)> handler) {
    on_acknowledged_ = std::move(handler);
  }
  // A connection that opens with a PyTorch TCPStore client's greeting (tcpstore_greeting.hpp:
  // torchrun pointed at this rendezvous) gets the answer to its ping, so that the client goes
  // on to its first real query and fails at once on the closed connection instead of retrying
  // until its timeout; then the channel finishes sending and `handler` is called (on_message is
  // not) with the greeting. Without it, such a connection is unreadable. Call before start().
  void answer_tcpstore_clients(std::function<void(const std::string& greeting)> handler) {
    on_tcpstore_client_ = std::move(handler);
  }
  // Whether the peer has sent anything at all (a TCPStore server, torchrun's rendezvous, waits
  // silently for a query it understands).
  bool received_anything() const { return received_anything_; }
  // Queues a message; ignored once the channel is closed or finish_sending() was called.
  void send(const nlohmann::json& message);
  // The same for a message already made into its line (wire_text, BroadcastLines).
  void send_line(std::string text);
  // Sends what is queued, then closes this direction (the peer reads it all, then EOF); keeps
  // reading until the peer closes too, at most heartbeat_timeout, then calls on_closed.
  void finish_sending();
  // Closes now; no callback follows but when_sent()'s.
  void close();
  // Calls `done` once everything queued so far is written (at once when nothing is), or when
  // the channel is closed or lost first: a node that leaves keeps its loop running until then.
  void when_sent(std::function<void()> done);

  const std::string& peer() const { return peer_; }
  asio::ip::tcp::endpoint local_endpoint() const;

 private:
  // A line's '\n' is written after it, not appended to it, which copied every line (its text is
  // sized to fit); the TCPStore answer has none.
  struct Outgoing {
    std::string text;
    bool line = false;
  };

  void read_next();
  void answer_tcpstore_client();
  void write_next();
  void expect_message_within_timeout();
  void wait_for_silence();
  void send_heartbeat_later();
  void send_heartbeat();
  void answer_if_due();
  void heartbeat_received(std::optional<Heartbeat> heartbeat);
  void queue(std::string line);
  void queue(Outgoing out);
  void lost(const std::string& why);

  asio::ip::tcp::socket socket_;
  RendezvousTimeouts timeouts_;
  std::string peer_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer silence_timer_;
  std::chrono::steady_clock::time_point silence_deadline_;  // lost when nothing comes by then
  bool silence_timer_armed_ = false;
  OnMessage on_message_;
  OnClosed on_closed_;
  std::function<void(const std::string& greeting)> on_tcpstore_client_;
  std::function<void(std::chrono::steady_clock::time_point)> on_acknowledged_;
  bool received_anything_ = false;
  std::optional<MessageAuth> auth_;
  std::string in_;
  // What is being written, and what is queued after it, oldest first: most often nothing, so a
  // vector (a deque allocated 576 bytes a channel up front).
  Outgoing sending_;
  std::vector<Outgoing> out_;
  bool heartbeats_held_ = false;
  bool answer_heartbeats_ = false;
  HeartbeatLedger sent_heartbeats_;                   // the sending side's
  std::uint64_t last_heartbeat_received_ = 0;         // the answering side's: the number to acknowledge
  std::chrono::steady_clock::time_point last_acknowledged_;  // when it last sent an acknowledgement
  bool writing_ = false;
  std::function<void()> on_sent_;  // when_sent()'s
  void sent();                     // calls on_sent_ once, if set
  bool sending_finished_ = false;
  bool closed_ = false;
};

}  // namespace ddprun::elastic
