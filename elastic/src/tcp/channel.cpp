#include "tcp/channel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/rendezvous_protocol.hpp"
#include "core/event_loop.hpp"
#include "store/tcpstore_greeting.hpp"

namespace ddprun::elastic {

namespace {
// A line longer than this is not a rendezvous message; the peer is closed as unreadable.
constexpr std::size_t kMaxMessageBytes = 1 << 20;

// Where a read ends: at a line's end, or, on a connection that has sent nothing before, after
// a TCPStore client's greeting (which has no newline, and waits for its answer).
struct LineOrGreeting {
  using result_type = std::pair<asio::buffers_iterator<asio::const_buffer>, bool>;
  bool first;
  template <class Iterator>
  std::pair<Iterator, bool> operator()(Iterator begin, Iterator end) const {
    if (first) {
      constexpr auto kGreeting = static_cast<std::ptrdiff_t>(kTcpStoreGreetingBytes);
      const std::string head(begin, begin + std::min<std::ptrdiff_t>(end - begin, kGreeting));
      switch (classify_opening(head)) {
        case Opening::kTcpStore: return {begin + kGreeting, true};
        case Opening::kUndecided: return {begin, false};
        case Opening::kOther: break;
      }
    }
    const Iterator newline = std::find(begin, end, '\n');
    return newline == end ? std::make_pair(end, false) : std::make_pair(newline + 1, true);
  }
};
}  // namespace

Channel::Channel(asio::ip::tcp::socket socket, const RendezvousTimeouts& timeouts, std::string peer,
                 NoDelay no_delay)
    : socket_(std::move(socket)),
      timeouts_(timeouts),
      peer_(std::move(peer)),
      heartbeat_timer_(socket_.get_executor()),
      silence_timer_(socket_.get_executor()) {
  asio::error_code ignored;
  if (no_delay == NoDelay::kSet) socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
}

asio::ip::tcp::endpoint Channel::local_endpoint() const {
  asio::error_code ignored;
  return socket_.local_endpoint(ignored);
}

void Channel::start(OnMessage on_message, OnClosed on_closed) {
  on_message_ = std::move(on_message);
  on_closed_ = std::move(on_closed);
  last_acknowledged_ = std::chrono::steady_clock::now();
  expect_message_within_timeout();
  if (!answer_heartbeats_) send_heartbeat_later();
  read_next();
}

void Channel::authenticate(MessageAuth auth) {
  auth_.emplace(std::move(auth));
  heartbeats_held_ = false;
}

void Channel::send(const nlohmann::json& message) {
  if (closed_ || sending_finished_) return;
  send_line(wire_text(message));
}

void Channel::send_line(std::string text) {
  if (closed_ || sending_finished_) return;
  queue(auth_ ? auth_->seal(text) : std::move(text));
}

void Channel::send_heartbeat() {
  if (closed_ || sending_finished_ || heartbeats_held_) return;
  const auto now = std::chrono::steady_clock::now();
  Heartbeat heartbeat{Heartbeat::Kind::kSeq, 0};
  if (answer_heartbeats_) {
    heartbeat = {Heartbeat::Kind::kAck, last_heartbeat_received_};
    last_acknowledged_ = now;
  } else {
    heartbeat.number = sent_heartbeats_.send(now);
  }
  std::string text = heartbeat_text(heartbeat);
  queue(auth_ ? auth_->seal(text) : std::move(text));
}

void Channel::queue(std::string line) { queue(Outgoing{std::move(line), true}); }

void Channel::queue(Outgoing out) {
  out_.push_back(std::move(out));
  if (!writing_) write_next();
}

void Channel::finish_sending() {
  if (closed_ || sending_finished_) return;
  sending_finished_ = true;
  heartbeat_timer_.cancel();
  // From now on the peer's heartbeats no longer keep the connection: it has heartbeat_timeout
  // to read what is queued and close.
  expect_message_within_timeout();
  if (!writing_) {
    asio::error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  }
}

void Channel::when_sent(std::function<void()> done) {
  on_sent_ = std::move(done);
  if (closed_ || (!writing_ && out_.empty())) sent();
}

void Channel::sent() {
  if (!on_sent_) return;
  const std::function<void()> done = std::move(on_sent_);
  on_sent_ = nullptr;
  done();
}

void Channel::close() {
  if (closed_) return;
  closed_ = true;
  on_message_ = nullptr;
  on_closed_ = nullptr;
  heartbeat_timer_.cancel();
  silence_timer_.cancel();
  asio::error_code ignored;
  socket_.close(ignored);
  sent();
}

void Channel::lost(const std::string& why) {
  if (closed_) return;
  OnClosed on_closed = std::move(on_closed_);
  close();
  if (on_closed) on_closed(why);
}

void Channel::read_next() {
  const bool first = !received_anything_ && on_tcpstore_client_;
  asio::async_read_until(
      socket_, asio::dynamic_buffer(in_, kMaxMessageBytes), LineOrGreeting{first},
      [self = shared_from_this(), first](const asio::error_code& ec, std::size_t length) {
        if (self->closed_) return;
        if (ec == asio::error::eof) return self->lost("closed the connection");
        if (ec == asio::error::not_found) return self->lost("sent a line longer than 1 MiB");
        if (ec) return self->lost(ec.message());
        self->received_anything_ = true;
        if (first && classify_opening(self->in_) == Opening::kTcpStore) return self->answer_tcpstore_client();
        if (!self->sending_finished_) self->expect_message_within_timeout();
        std::string_view line(self->in_.data(), length - 1);
        if (self->auth_) {
          try {
            line = self->auth_->open(line);
          } catch (const AuthError& e) {
            return self->lost(fmt::format("sent {}", e.what()));
          }
        }
        // A heartbeat as ddprun sends it is known by its text; any other is parsed.
        const std::optional<Heartbeat> heartbeat = read_heartbeat(line);
        std::optional<nlohmann::json> parsed;
        if (!heartbeat) parsed = parse_message(line);
        self->in_.erase(0, length);
        if (!heartbeat && !parsed) {
          return self->lost(fmt::format(
              "sent a message that is not a JSON object with a \"type\" (nested at most {} deep)", kMaxMessageDepth));
        }
        if (heartbeat) {
          self->heartbeat_received(heartbeat);
        } else if ((*parsed)["type"] == "heartbeat") {
          self->heartbeat_received(read_heartbeat_json(*parsed));
        } else if (self->on_message_) {
          const OnMessage on_message = self->on_message_;  // the handler may close() this channel
          on_message(*parsed);
        }
        if (!self->closed_) self->read_next();
      });
}

void Channel::answer_tcpstore_client() {
  const std::string greeting = in_.substr(0, kTcpStoreGreetingBytes);
  in_.erase(0, kTcpStoreGreetingBytes);
  queue(Outgoing{tcpstore_ping_answer(greeting), false});
  finish_sending();
  const auto handler = on_tcpstore_client_;  // it may close() this channel
  handler(greeting);
  if (!closed_) read_next();
}

void Channel::write_next() {
  writing_ = true;
  sending_ = std::move(out_.front());  // out_ may grow, and move its strings, while this one is written
  out_.erase(out_.begin());
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(sending_.text),
                                                  asio::buffer("\n", sending_.line ? 1 : 0)};
  asio::async_write(socket_, buffers,
                    [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                      self->writing_ = false;
                      if (self->closed_) return;
                      if (ec) return self->lost(ec.message());
                      if (!self->out_.empty()) {
                        self->write_next();
                        return;
                      }
                      if (self->sending_finished_) {
                        asio::error_code ignored;
                        self->socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
                      }
                      self->sent();
                    });
}

// Moves the deadline without touching the timer: a host of 10,000 nodes receives 20,000
// heartbeats a second, and cancelling and re-arming a timer for each cost as much as reading
// them. The timer, when it fires, waits again for whatever is left.
void Channel::expect_message_within_timeout() {
  silence_deadline_ = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(seconds(timeouts_.heartbeat_timeout));
  if (!silence_timer_armed_) wait_for_silence();
}

void Channel::wait_for_silence() {
  silence_timer_armed_ = true;
  silence_timer_.expires_at(silence_deadline_);
  silence_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    self->silence_timer_armed_ = false;
    if (ec || self->closed_) return;
    if (self->silence_deadline_ > std::chrono::steady_clock::now()) return self->wait_for_silence();
    self->lost(fmt::format("sent nothing, not even a heartbeat, for {} s (--rdzv_conf heartbeat_timeout)",
                           self->timeouts_.heartbeat_timeout));
  });
}

double heartbeat_answer_after(const RendezvousTimeouts& timeouts) {
  return std::max(0.0, timeouts.heartbeat_timeout / 3 - timeouts.heartbeat_interval);
}

// A heartbeat with no number (a peer's that only says it is there) is answered all the same,
// with the last number received.
void Channel::heartbeat_received(std::optional<Heartbeat> heartbeat) {
  if (answer_heartbeats_) {
    if (heartbeat && heartbeat->kind == Heartbeat::Kind::kSeq) {
      last_heartbeat_received_ = std::max(last_heartbeat_received_, heartbeat->number);
    }
    return answer_if_due();
  }
  if (!heartbeat || heartbeat->kind != Heartbeat::Kind::kAck) return;
  if (const auto sent_at = sent_heartbeats_.acknowledged(heartbeat->number); sent_at && on_acknowledged_) {
    on_acknowledged_(*sent_at);
  }
}

void Channel::answer_if_due() {
  if (std::chrono::steady_clock::now() - last_acknowledged_ >= seconds(heartbeat_answer_after(timeouts_))) {
    send_heartbeat();
  }
}

void Channel::send_heartbeat_later() {
  heartbeat_timer_.expires_after(seconds(timeouts_.heartbeat_interval));
  heartbeat_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (ec || self->closed_ || self->sending_finished_) return;
    self->send_heartbeat();
    self->send_heartbeat_later();
  });
}

}  // namespace ddprun::elastic
