// Fencing: a node that the coordinator may count lost has killed its workers first, so that no
// two live workers ever hold the same rank of the job (issue 43).
//
// The rule. The coordinator counts a node lost once it has heard nothing from it for
// `lifetime` seconds: the TCP host's heartbeat_timeout, etcd's lease time to live. It cannot
// have heard a message that the node sent at S before S, so it cannot count the node lost
// before S + lifetime. A node therefore keeps the moment S at which it sent the last message
// that the coordinator has acknowledged (a heartbeat the TCP host's answer names, a lease
// keep-alive etcd answered), and kills its workers, SIGKILL without a grace period, at
//
//     S + lifetime - fence_margin(lifetime)
//
// unless a newer acknowledgement came first. A graceful stop could let them act (write a
// checkpoint) after the job re-formed; a SIGKILLed process runs no code of its own.
//
// The margin covers what makes the two ends disagree on when that moment is: the rates of the
// two machines' clocks (CLOCK_MONOTONIC, which NTP slews by at most 500 ppm: 2.5 ms over 5 s),
// the node's timer firing late on a loaded machine, and the kernel delivering SIGKILL. In a
// healthy network the host acknowledges a heartbeat at least every max(lifetime / 3, interval)
// (channel.hpp), so a node with heartbeat_interval <= heartbeat_timeout / 2 (validate()) keeps
// its fence at least 0.3 x lifetime ahead: a fence means lost acknowledgements, not a slow one.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

namespace ddprun::elastic {

// The margin, in seconds, by which a node's fence comes before the coordinator's earliest
// moment: a fifth of the lifetime, at least 0.2 s.
double fence_margin(double lifetime);

// When a node whose acknowledged message was sent at `sent_at` kills its workers.
std::chrono::steady_clock::time_point fence_deadline(std::chrono::steady_clock::time_point sent_at,
                                                     double lifetime);
// When the backstop outside the launcher (its orphan guard) kills them if the launcher has not:
// half a margin later, still half a margin before the coordinator can act, so that a launcher
// that runs fences first and says why.
std::chrono::steady_clock::time_point backstop_deadline(std::chrono::steady_clock::time_point sent_at,
                                                        double lifetime);

// The heartbeats a node sent and not yet saw acknowledged: their numbers and when each was sent.
// Pure; the TCP client's Channel keeps one.
class HeartbeatLedger {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // Kept at most: a node that hears no answer for this many heartbeats forgets the oldest
  // (an acknowledgement of one of those then moves nothing: the fence only comes sooner).
  static constexpr std::size_t kMaxUnacknowledged = 256;

  // The next heartbeat's number, recorded as sent at `now`.
  std::uint64_t send(TimePoint now);
  // The host acknowledges `number`: when it was sent, if that is newer than every
  // acknowledgement so far; nullopt for a number never sent, forgotten or already passed.
  std::optional<TimePoint> acknowledged(std::uint64_t number);

 private:
  std::uint64_t next_ = 1;
  std::deque<std::pair<std::uint64_t, TimePoint>> unacknowledged_;  // oldest first
};

}  // namespace ddprun::elastic
