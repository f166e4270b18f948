#include "etcd/etcd_rendezvous.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/node_report.hpp"
#include "core/rendezvous_protocol.hpp"
#include "core/node_identity.hpp"

namespace ddprun::elastic {

namespace {

using etcd::base64_encode;
using etcd::EtcdError;
using etcd::json_int;
using etcd::put_op;
using Json = nlohmann::json;

// Until etcd answers, it is asked again this often; join_timeout bounds the whole wait.
constexpr double kMaxRetry = 1.0;
// How long the first attempt to take a lease goes round the members: short, so that a node
// stopped while it joins does not wait for it; each later one twice as long, up to kMaxJoinTry
// (a slow link: an answer that comes later than an attempt waits comes to none).
constexpr double kJoinTry = 2 * etcd::EtcdClient::kFirstTry;
constexpr double kMaxJoinTry = 8;
// The calls of a node that leaves: its lease would expire anyway.
constexpr double kLeaveTry = etcd::EtcdClient::kFirstTry;
std::string random_node_id() {
  std::random_device random;
  return etcd::make_node_id(host_name(), static_cast<long>(::getpid()), random());
}

}  // namespace

std::unique_ptr<Rendezvous> make_etcd_rendezvous(asio::io_context& io, const RendezvousConfig& config) {
  return std::make_unique<EtcdRendezvous>(io, config);
}

EtcdRendezvous::EtcdRendezvous(asio::io_context& io, RendezvousConfig config)
    : NodeRendezvous(io),
      config_(std::move(config)),
      keys_(config_.run_id),
      id_(random_node_id()),
      ttl_(std::max(2, static_cast<int>(std::ceil(config_.timeouts.heartbeat_timeout)))),
      client_(std::make_unique<etcd::EtcdClient>(etcd_endpoints(config_), etcd_settings(config_))),
      join_timer_(io),
      retry_timer_(io),
      join_try_(kJoinTry),
      cleanup_timer_(io) {}

EtcdRendezvous::~EtcdRendezvous() {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  stop_ = true;
  wake_.notify_all();
  if (request_thread_.joinable()) request_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  keeper_.reset();
}

template <class F>
void EtcdRendezvous::on_loop(F f) {
  asio::post(io_, [alive = lifetime_.token(), f = std::move(f)]() mutable {
    if (!alive.expired()) f();
  });
}

void EtcdRendezvous::request(std::string path, Json body, std::function<void(const Json&)> done,
                             std::function<void(const EtcdError&)> failed, std::optional<double> budget) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back([this, path = std::move(path), body = std::move(body), done = std::move(done),
                      failed = std::move(failed), budget = budget.value_or(ttl_)] {
      try {
        Json answer = client_->call(path, body, budget);
        if (done) on_loop([this, done, answer = std::move(answer)] { if (!left_) done(answer); });
      } catch (const EtcdError& e) {
        if (failed) on_loop([this, failed, e] { if (!left_) failed(e); });
      } catch (const std::exception& e) {
        EtcdError error(fmt::format("etcd gave an answer ddprun cannot read: {}", e.what()), false);
        if (failed) on_loop([this, failed, error] { if (!left_) failed(error); });
      }
    });
  }
  wake_.notify_all();
  if (!request_thread_.joinable()) {
    request_thread_ = std::thread([this] {
      std::unique_lock lock(mutex_);
      for (;;) {
        wake_.wait(lock, [this] { return !queue_.empty() || draining_; });
        if (queue_.empty()) return;  // draining, and nothing left
        auto job = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        job();
        lock.lock();
      }
    });
  }
}

void EtcdRendezvous::join(Handlers handlers) {
  if (!start_joining(std::move(handlers), config_)) return;
  if (const std::string problem = etcd::load_libcurl(); !problem.empty()) return fail(problem);
  join_timer_.expires_after(seconds(config_.timeouts.join_timeout));
  join_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (ec || alive.expired() || lease_ != 0 || round_.state() != NodeRound::State::kJoining) return;
    retry_timer_.cancel();
    fail(
        fmt::format("could not reach etcd at {} within {} s (last error: {}); start etcd, check --rdzv_endpoint, or "
                    "raise --rdzv_conf join_timeout=SECONDS",
                    client_->describe(), config_.timeouts.join_timeout, last_error_));
  });
  grant_lease();
}

void EtcdRendezvous::grant_lease() {
  if (round_.state() != NodeRound::State::kJoining || left_) return;
  const auto sent = std::chrono::steady_clock::now();
  request(
      "/v3/lease/grant", {{"TTL", std::to_string(ttl_)}},
      [this, sent](const Json& answer) {
        if (round_.state() != NodeRound::State::kJoining) return;
        lease_ = json_int(answer, "ID");
        lease_renewed(sent);
        join_timer_.cancel();
        register_node();
      },
      [this](const EtcdError& e) {
        if (round_.state() != NodeRound::State::kJoining) return;
        last_error_ = e.what();
        if (!e.unreachable) {
          return fail(fmt::format("etcd refused this node a lease: {}", e.what()));
        }
        retry_timer_.expires_after(seconds(retry_delay_));
        retry_delay_ = std::min(retry_delay_ * 2, kMaxRetry);
        join_try_ = std::min(join_try_ * 2, kMaxJoinTry);
        retry_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
          if (!ec && !alive.expired()) grant_lease();
        });
      },
      join_try_);
}

void EtcdRendezvous::register_node() {
  addr_ = config_.local_addr.empty() ? client_->local_address() : config_.local_addr;
  if (addr_.empty()) addr_ = host_name();
  const Json spec = node_spec(config_, addr_, master_port_->port(), false);
  request(
      "/v3/kv/put", put_op(keys_.node(id_), spec.dump(), lease_).at("request_put"),
      [this](const Json&) {
        if (round_.state() != NodeRound::State::kJoining) return;
        apply(round_.joined());
        // Every ttl/3, the lease is renewed through whichever member answers, going round
        // them until the lease would expire: a member that dies or hangs costs a renewal a
        // try (EtcdClient::call), not the lease. Each renewal moves the fence; a slow link
        // does not space them further apart (lease_keeper.hpp).
        keeper_ = std::make_unique<etcd::LeaseKeeper>(
            *client_, lease_, ttl_, std::chrono::milliseconds(ttl_ * 1000 / 3), std::chrono::steady_clock::now(),
            etcd::LeaseKeeper::Handlers{
                [this](std::chrono::steady_clock::time_point sent) { on_loop([this, sent] { lease_renewed(sent); }); },
                [this](const std::string& why) { on_loop([this, why] { lost_etcd(why); }); }});
        elect();
      },
      [this](const EtcdError& e) { fail(fmt::format("could not register this node in etcd: {}", e.what())); });
}

void EtcdRendezvous::elect() {
  if (round_.state() == NodeRound::State::kDone || finishing_ || electing_) return;
  electing_ = true;
  request("/v3/kv/txn", etcd::create_and_read_txn(keys_.leader(), id_, lease_, keys_.prefix()),
          [this](const Json& answer) { on_elected(answer); },
          [this](const EtcdError& e) { lost_etcd(fmt::format("the election of a leader failed: {}", e.what())); });
}

void EtcdRendezvous::on_elected(const Json& txn) {
  electing_ = false;
  if (round_.state() == NodeRound::State::kDone) return;
  const std::int64_t revision = json_int(txn.at("header"), "revision");
  const Json& responses = txn.at("responses");
  const Json& range = responses.back().at("response_range");
  const Json kvs = range.value("kvs", Json::array());
  for (const auto& kv : kvs) {
    const auto e = etcd::parse_kv(kv);
    if (e.key == keys_.leader()) leader_ = e.value;
  }
  // The transaction may have reached etcd twice (EtcdClient::call): the second finds the
  // leader key that the first put, with this node's id.
  if (txn.value("succeeded", false) || leader_ == id_) lead(kvs, revision);
  if (!watch_thread_.joinable()) start_watch(revision + 1);
  // Messages the leader wrote to this node before the snapshot (between its registration and
  // this election): the watch starts after them. Seen here for the first time, whatever their
  // version.
  std::vector<etcd::WatchEvent> mine;
  for (const auto& kv : kvs) {
    auto e = etcd::parse_kv(kv);
    const auto key = keys_.parse(e.key);
    if (key.kind == etcd::JobKeys::Kind::kMessage && key.node == id_) mine.push_back(std::move(e));
  }
  std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.mod_revision < b.mod_revision; });
  for (const auto& e : mine) {
    if (round_.state() == NodeRound::State::kDone) return;
    take_message(e);
  }
  // What the watch saw while the election was under way, after the snapshot's revision.
  std::vector<etcd::WatchEvent> held = std::exchange(held_, {});
  held.erase(std::remove_if(held.begin(), held.end(), [&](const auto& e) { return e.mod_revision <= revision; }),
             held.end());
  if (!held.empty()) on_watch_events(std::move(held));
}

void EtcdRendezvous::start_watch(std::int64_t revision) {
  watch_thread_ = std::thread([this, revision] {
    std::int64_t next = revision;
    const std::string prefix = keys_.prefix();
    while (!stop_) {
      try {
        const Json create = {{"key", base64_encode(prefix)},
                             {"range_end", base64_encode(etcd::prefix_end(prefix))},
                             {"start_revision", std::to_string(next)}};
        client_->watch(
            create,
            [this, &next](const Json& message) {
              auto events = etcd::parse_watch_message(message);
              if (events.empty()) return;
              next = events.back().mod_revision + 1;
              on_loop([this, events = std::move(events)]() mutable { on_watch_events(std::move(events)); });
            },
            stop_);
      } catch (const std::exception& e) {
        // Another member, or the same once it is back; the keep-alives decide when to give up.
        std::unique_lock lock(mutex_);
        wake_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_.load(); });
      }
    }
  });
}

void EtcdRendezvous::on_watch_events(std::vector<etcd::WatchEvent> events) {
  if (left_ || round_.state() == NodeRound::State::kDone) return;
  if (electing_) {
    held_.insert(held_.end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
    return;
  }
  for (const auto& event : events) {
    if (left_ || round_.state() == NodeRound::State::kDone) return;
    handle(event);
  }
}

void EtcdRendezvous::handle(const etcd::WatchEvent& event) {
  using Kind = etcd::JobKeys::Kind;
  const auto key = keys_.parse(event.key);
  switch (key.kind) {
    case Kind::kLeader:
      if (!event.deleted) {
        leader_ = event.value;
      } else if (!cleaning_) {
        leader_lost(std::exchange(leader_, ""));
      }
      return;
    case Kind::kNode:
      if (host_) {
        if (event.deleted) {
          const auto it = node_ids_.find(key.node);
          if (it != node_ids_.end()) {
            const NodeId id = it->second;
            node_ids_.erase(it);
            if (key.node != id_) {
              host_->node_gone(id, "its lease in etcd expired or was revoked (its launcher stopped or lost etcd)");
            }
          }
          clean_up_if_alone();
        } else {
          leader_join(key.node, event.value, event.create_revision);
        }
      }
      if (event.deleted && key.node == id_ && !finishing_) {
        lost_etcd("this node's key in etcd is gone: its lease expired");
      }
      return;
    // Events and messages are written once each, under a key of their own; a later version is
    // the same write reaching etcd again (EtcdClient::call tries again after a timeout).
    case Kind::kEvent:
      if (host_ && !event.deleted && event.version == 1) leader_event(key.node, event.value);
      return;
    case Kind::kMessage:
      if (key.node == id_ && !event.deleted && event.version == 1) take_message(event);
      return;
    case Kind::kState:
    case Kind::kOther:
      return;
  }
}

void EtcdRendezvous::take_message(const etcd::WatchEvent& event) {
  if (event.mod_revision <= message_revision_) return;
  message_revision_ = event.mod_revision;
  if (const std::optional<Json> message = parse_message(event.value)) {
    on_message(*message);
  } else {
    lost_etcd("the leader wrote a message that is not a JSON object with a \"type\", or has a number out of range");
  }
}

void EtcdRendezvous::leader_lost(const std::string& leader) {
  if (finishing_ || host_) return;  // the leader deletes its own key only when it cleans up
  apply(round_.coordinator_lost(fmt::format("the rendezvous leader {} was lost", leader.empty() ? "?" : leader)));
  elect();
}

void EtcdRendezvous::on_message(const Json& message) {
  try {
    handle_message(message, [this](JobOutcome outcome) {
      // The leader finishes once the others have gone (clean_up_if_alone).
      if (!host_) finish_after_revoke(std::move(outcome));
    });
  } catch (const std::exception& e) {
    lost_etcd(fmt::format("the leader wrote a bad message: {}", e.what()));
  }
}

void EtcdRendezvous::send_event(Json event) {
  request("/v3/kv/put", put_op(keys_.event(id_, ++event_seq_), event.dump(), lease_).at("request_put"), nullptr,
          [this](const EtcdError& e) { lost_etcd(fmt::format("could not write to etcd: {}", e.what())); });
}

// The node's keys go with its lease, so that the leader sees it leave at once.
void EtcdRendezvous::finish_after_revoke(JobOutcome outcome) {
  if (finishing_) return;
  finishing_ = true;
  auto done = [this, outcome](auto&&...) { end(outcome); };
  request("/v3/lease/revoke", {{"ID", std::to_string(lease_)}}, done, done);
}

// Fencing (core/fence.hpp): etcd set the lease's expiry to ttl_ after it received a grant or
// keep-alive that this node sent at `sent`, so the leader cannot see this node's keys expire
// before sent + ttl_.
void EtcdRendezvous::lease_renewed(std::chrono::steady_clock::time_point sent) {
  if (round_.state() == NodeRound::State::kDone || finishing_) return;
  coordinator_heard(sent, ttl_, fmt::format("etcd at {} (this node's lease)", client_->describe()));
}

void EtcdRendezvous::lost_etcd(const std::string& why) {
  if (round_.state() == NodeRound::State::kDone || finishing_) return;
  fail(fmt::format("{}; the other nodes go on without this one if they can (etcd at {})", why, client_->describe()));
}

void EtcdRendezvous::release() {
  join_timer_.cancel();
  retry_timer_.cancel();
  if (host_) host_->halt();
  cleanup_timer_.cancel();
  if (keeper_) keeper_->stop_soon();
  stop_ = true;
  wake_.notify_all();
}

// Queued: the destructor waits for them. The leader learns why, then sees the node go.
void EtcdRendezvous::leave_job(int signal, const std::string& quarantined) {
  if (lease_ == 0) return;
  request("/v3/kv/put",
          put_op(keys_.event(id_, ++event_seq_), leave_message(signal, quarantined).dump(), lease_).at("request_put"),
          nullptr, nullptr, kLeaveTry);
  request("/v3/lease/revoke", {{"ID", std::to_string(lease_)}}, nullptr, nullptr, kLeaveTry);
}

}  // namespace ddprun::elastic
