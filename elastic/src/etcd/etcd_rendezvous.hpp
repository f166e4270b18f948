// The multi-node rendezvous kept in etcd (--rdzv_backend=etcd), through etcd's v3 API.
//
// Every node holds a lease, kept alive from a helper thread, and puts its NodeSpec under the
// job's prefix with it (etcd_protocol.hpp has the key layout): a node whose launcher dies or
// loses etcd disappears when its lease expires. One node, elected with a transaction that
// creates the leader key only if it is absent, runs the job's JobCoordinator: it learns of
// nodes and their reports from one watch on the prefix, and writes each node's messages
// (assign, stop, finish) under that node's key, in transactions that succeed only while it is
// still the leader. When the leader is lost, every node stops its round and the nodes elect
// another, which goes on from the rounds and restarts recorded in the state key. Every node,
// the leader included, reads its own messages from its watch, so there is no polling.
//
// etcd is reached through its JSON gateway with libcurl (etcd_client.hpp). The blocking calls
// run on a helper thread in order, the watch and the keep-alives (lease_keeper.hpp) on their own threads; their
// results are posted to the launcher's io_context, where all the logic runs.
#pragma once

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/coordinator_host.hpp"
#include "core/node_rendezvous.hpp"
#include "etcd/etcd_client.hpp"
#include "etcd/etcd_protocol.hpp"
#include "etcd/lease_keeper.hpp"
#include "core/event_loop.hpp"
#include "store/master_port.hpp"

namespace ddprun::elastic {

class EtcdRendezvous final : public NodeRendezvous, private CoordinatorTransport {
 public:
  // `config` must have passed validate(). Does no I/O.
  EtcdRendezvous(asio::io_context& io, RendezvousConfig config);
  // Waits for the calls already queued (a leaving node's lease revocation), each bounded by
  // its timeout, and for the helper threads to end.
  ~EtcdRendezvous() override;

  // Takes a lease, retrying until join_timeout while etcd cannot be reached; registers this
  // node and takes part in the election.
  void join(Handlers handlers) override;

 private:
  using Json = nlohmann::json;

  void report(const nlohmann::json& message) override { send_event(message); }
  void leave_job(int signal, const std::string& quarantined) override;
  void release() override;

  // Runs client_->call(path, body, budget) on the request thread; `done` or `failed` follows
  // on the loop. By default a call has the lease's time: a write that cannot land before this
  // node's lease would expire has lost the job anyway.
  void request(std::string path, Json body, std::function<void(const Json&)> done,
               std::function<void(const etcd::EtcdError&)> failed, std::optional<double> budget = std::nullopt);
  template <class F>
  void on_loop(F f);

  void grant_lease();
  void register_node();
  void elect();
  void on_elected(const Json& txn);
  void start_watch(std::int64_t revision);
  void on_watch_events(std::vector<etcd::WatchEvent> events);
  void handle(const etcd::WatchEvent& event);
  void leader_lost(const std::string& leader);
  // A message to this node, acted on once (its mod_revision is past the last one's).
  void take_message(const etcd::WatchEvent& event);
  void on_message(const Json& message);
  void send_event(Json event);
  void finish_after_revoke(JobOutcome outcome);
  void lease_renewed(std::chrono::steady_clock::time_point sent);
  void lost_etcd(const std::string& why);

  // The leader's part.
  void lead(const Json& kvs, std::int64_t revision);
  void leader_join(const std::string& node, const std::string& spec, std::int64_t created);
  void leader_event(const std::string& node, const std::string& event);
  void deliver(const Messages& messages) override;
  void membership_changed(const JobMembership& membership) override { announce(membership); }
  void clean_up_if_alone();
  // Quarantined (a Finish to this node while the job goes on): writes nothing more, and leaves.
  void step_down(JobOutcome outcome);

  RendezvousConfig config_;
  etcd::JobKeys keys_;
  std::string id_;  // this node's id in etcd
  int ttl_;         // the lease's, in whole seconds
  std::unique_ptr<etcd::EtcdClient> client_;
  std::int64_t lease_ = 0;
  std::string addr_;
  std::string leader_;              // the leader's id, as last seen
  bool electing_ = false;           // a txn of the election is under way
  std::vector<etcd::WatchEvent> held_;  // seen by the watch while electing
  bool finishing_ = false;          // this node got its finish and revokes its lease
  std::uint64_t event_seq_ = 0;
  std::int64_t message_revision_ = 0;  // of the last message to this node that it acted on
  asio::steady_timer join_timer_;
  asio::steady_timer retry_timer_;
  double retry_delay_ = 0.05;
  double join_try_;  // seconds: the budget of the next attempt to take a lease (kJoinTry at first)
  std::string last_error_;

  // The leader's state, while this node is the leader.
  std::optional<CoordinatorHost> host_;
  std::map<std::string, NodeId> node_ids_;
  std::map<NodeId, std::string> node_names_;
  NodeId next_node_ = 1;
  std::uint64_t message_seq_ = 0;
  etcd::JobState state_;                 // as last written to the state key
  std::uint64_t history_written_ = 0;    // the coordinator's history_version() in state_
  std::optional<JobOutcome> leader_finish_;  // its own outcome, given once the others are gone
  bool cleaning_ = false;
  asio::steady_timer cleanup_timer_;

  // Helper threads.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::atomic<bool> stop_{false};
  bool draining_ = false;
  std::thread request_thread_;
  std::thread watch_thread_;
  std::unique_ptr<etcd::LeaseKeeper> keeper_;  // from the lease's grant on
};

// An EtcdRendezvous, as the etcd row of src/backends.cpp makes it.
std::unique_ptr<Rendezvous> make_etcd_rendezvous(asio::io_context& io, const RendezvousConfig& config);

}  // namespace ddprun::elastic
