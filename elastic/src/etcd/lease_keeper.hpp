// Keeps a node's etcd lease alive: a keep-alive every `interval`, each on its own schedule, not
// after the one before has been answered. Two threads take turns, so that a slow link (every
// answer `latency` late) still moves the fence every `interval`: the renewals' spacing stays
// `interval` while latency < 2 × interval, where one keep-alive at a time, sent `interval` after
// the last answer, would space them interval + latency apart and fence a node whose every
// keep-alive was answered (core/fence.hpp: the fence needs one every lifetime − margin).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "etcd/etcd_client.hpp"

namespace ddprun::elastic::etcd {

class LeaseKeeper {
 public:
  using Clock = std::chrono::steady_clock;
  // Called from its threads: `renewed` with when the keep-alive that etcd answered was sent
  // (answers may come out of order), `lost` once with why the lease is gone or could not be
  // renewed for `ttl` seconds. Neither after stop().
  struct Handlers {
    std::function<void(Clock::time_point sent)> renewed;
    std::function<void(const std::string& why)> lost;
  };
  // Starts at once; `last_renewed`: when the lease was last granted or renewed.
  LeaseKeeper(EtcdClient& client, std::int64_t lease, int ttl, Clock::duration interval, Clock::time_point last_renewed,
              Handlers handlers);
  ~LeaseKeeper() { stop(); }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // No keep-alive after this; returns at once (a keep-alive under way ends by itself).
  void stop_soon();
  // Ends both threads, waiting for a keep-alive under way (bounded by what is left of the lease).
  void stop();

 private:
  void run(int turn);
  void renewed(Clock::time_point sent);

  EtcdClient& client_;
  const std::int64_t lease_;
  const int ttl_;
  const Clock::duration interval_;
  const Clock::time_point first_;
  Handlers handlers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool lost_ = false;
  Clock::time_point last_ok_;  // when etcd last answered a keep-alive (or granted the lease)
  std::thread threads_[2];
};

}  // namespace ddprun::elastic::etcd
