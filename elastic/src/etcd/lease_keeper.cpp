#include "etcd/lease_keeper.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "etcd/etcd_protocol.hpp"

namespace ddprun::elastic::etcd {

LeaseKeeper::LeaseKeeper(EtcdClient& client, std::int64_t lease, int ttl, Clock::duration interval,
                         Clock::time_point last_renewed, Handlers handlers)
    : client_(client),
      lease_(lease),
      ttl_(ttl),
      interval_(interval),
      first_(Clock::now()),
      handlers_(std::move(handlers)),
      last_ok_(last_renewed) {
  threads_[0] = std::thread([this] { run(0); });
  threads_[1] = std::thread([this] { run(1); });
}

void LeaseKeeper::stop_soon() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
}

void LeaseKeeper::stop() {
  stop_soon();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

// Both send one at once, which opens each one's connection while the link may still be fast (a
// new one costs a round trip more); then turn k sends at first_ + (1 + k + 2n) × interval: the
// threads alternate, an interval apart. A keep-alive may go round the members for what is left
// of the lease; its thread's next turn then comes at once, while the other keeps its own.
void LeaseKeeper::run(int turn) {
  auto next = first_;
  bool opening = true;
  EtcdClient::Connection connection;  // this thread's: the other's may wait for a late answer
  std::unique_lock lock(mutex_);
  for (;;) {
    if (wake_.wait_until(lock, next, [this] { return stop_ || lost_; })) return;
    const double left = std::chrono::duration<double>(last_ok_ + std::chrono::seconds(ttl_) - Clock::now()).count();
    if (left <= 0) {  // this launcher did not run (stopped, stalled) until its lease's time had passed
      lost_ = true;
      wake_.notify_all();
      lock.unlock();
      handlers_.lost(fmt::format("this node's lease was last renewed {:.1f} s ago, past its {} s: this launcher did "
                                 "not run in between (stopped or stalled)",
                                 ttl_ - left, ttl_));
      return;
    }
    lock.unlock();
    std::string lost, error;
    const auto sent = Clock::now();
    try {
      const auto answer = client_.call("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}}, left, &connection);
      if (json_int(answer.value("result", nlohmann::json::object()), "TTL") <= 0) {
        lost = "etcd says that this node's lease has expired";
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (stop_ || lost_) return;
    if (lost.empty() && error.empty()) {
      last_ok_ = std::max(last_ok_, Clock::now());
      lock.unlock();
      handlers_.renewed(sent);  // the other thread may have moved it later already: the fence keeps the latest
      lock.lock();
    } else if (lost.empty() && Clock::now() - last_ok_ >= std::chrono::seconds(ttl_)) {
      lost = fmt::format("could not keep this node's lease alive for {} s: {}", ttl_, error);
    }
    if (!lost.empty()) {
      lost_ = true;
      wake_.notify_all();
      lock.unlock();
      handlers_.lost(lost);
      return;
    }
    next = std::max(opening ? first_ + interval_ * (1 + turn) : next + 2 * interval_, Clock::now());
    opening = false;
  }
}

}  // namespace ddprun::elastic::etcd
