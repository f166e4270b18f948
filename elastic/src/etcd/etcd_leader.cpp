// EtcdRendezvous, the leader's part: while this node holds the leader key, it runs the job's
// CoordinatorHost on the nodes' keys and events its watch sees, and writes each node's
// messages in transactions that hold only while it is still the leader.
#include <fmt/format.h>

#include <algorithm>

#include "core/node_identity.hpp"
#include "core/node_report.hpp"
#include "core/rendezvous_protocol.hpp"
#include "etcd/etcd_rendezvous.hpp"

namespace ddprun::elastic {

namespace {

using etcd::base64_encode;
using etcd::EtcdError;
using etcd::put_op;
using Json = nlohmann::json;

// Operations of one transaction: etcd refuses more than 128 by default.
constexpr std::size_t kMaxTxnOps = 100;

}  // namespace

void EtcdRendezvous::lead(const Json& kvs, std::int64_t /*revision*/) {
  JobSettings settings = job_settings(config_);
  std::vector<etcd::WatchEvent> nodes;
  for (const auto& kv : kvs) {
    const auto e = etcd::parse_kv(kv);
    const auto key = keys_.parse(e.key);
    if (key.kind == etcd::JobKeys::Kind::kState) {
      const std::optional<Json> state = parse_peer_json(e.value);
      try {
        if (!state || !state->is_object()) throw std::invalid_argument("not a JSON object");
        etcd::JobState parsed = etcd::parse_state(*state, monotonic_seconds() - wall_seconds());
        settings.rounds_before = parsed.rounds;
        settings.restarts_used = parsed.restarts;
        settings.history = std::move(parsed.history);
      } catch (const std::exception& error) {
        say(fmt::format("ddprun: ignoring the job's state in etcd, which this leader cannot read: {}\n", error.what()));
      }
    } else if (key.kind == etcd::JobKeys::Kind::kNode) {
      nodes.push_back(e);
    }
  }
  // Join order is the order in which the nodes registered.
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a.mod_revision < b.mod_revision; });
  leader_ = id_;
  state_ = {settings.rounds_before, settings.restarts_used, settings.history};
  host_.emplace(io_, std::move(settings), static_cast<CoordinatorTransport&>(*this));
  history_written_ = host_->coordinator().history_version();
  for (const auto& e : nodes) leader_join(keys_.parse(e.key).node, e.value, e.create_revision);
}

void EtcdRendezvous::leader_join(const std::string& node, const std::string& spec_text, std::int64_t created) {
  if (node_ids_.count(node)) return;
  const std::optional<Json> spec = parse_peer_json(spec_text);
  NodeSpec parsed;
  try {
    if (!spec) throw std::invalid_argument("not JSON, nested too deep, or a number out of range");
    parsed = spec->get<NodeSpec>();
  } catch (const std::exception&) {
    return;  // not a ddprun node of this version: it will time out on its own
  }
  // The revision that created its key names the node alike for every leader, so that the
  // history a leader leaves in the state (suspect nodes) means the same nodes to the next.
  const NodeId id = created > 0 ? static_cast<NodeId>(created) : (NodeId{1} << 62) + next_node_++;
  node_ids_[node] = id;
  node_names_[id] = node;
  host_->join(id, parsed, Joiner::kPeer);
}

void EtcdRendezvous::leader_event(const std::string& node, const std::string& text) {
  const auto it = node_ids_.find(node);
  if (it == node_ids_.end()) return;
  const NodeId id = it->second;
  NodeReport report;
  try {
    const std::optional<Json> parsed = parse_message(text);
    if (!parsed) throw std::invalid_argument("not a JSON object with a \"type\", or a number out of range");
    report = read_report(*parsed, host_->coordinator().nproc(id));
  } catch (const std::exception& e) {
    return say(fmt::format("ddprun: ignoring a bad report from node {} in etcd: {}\n", node, e.what()));
  }
  if (std::holds_alternative<LeaveReport>(report)) node_ids_.erase(it);
  host_->receive(id, report);
}

void EtcdRendezvous::deliver(const Messages& messages) {
  const JobCoordinator& coordinator = host_->coordinator();
  const bool history_changed = coordinator.history_version() != history_written_;
  if (messages.empty() && !history_changed) return;
  std::vector<Json> ops;
  std::optional<JobOutcome> own_finish;
  std::optional<RoundAssignment> started;
  for (const Message& m : messages) {
    const NodeId to = recipient(m);
    const auto name = node_names_.find(to);
    if (name == node_names_.end()) continue;
    if (const auto* a = std::get_if<Assign>(&m)) started = a->assignment;
    if (const auto* f = std::get_if<Finish>(&m); f && name->second == id_) own_finish = f->outcome;
    ops.push_back(put_op(keys_.message(name->second, id_, ++message_seq_), to_wire(m).dump(), lease_));
  }
  // This node is quarantined while the job goes on: it hands the lead over. The next leader
  // starts from the state, so the others' messages are left to it.
  const bool resign = own_finish && !coordinator.finished();
  if (resign) {
    ops.clear();
    started.reset();
  }
  if (started) {
    state_.rounds = started->round;
    state_.restarts = started->restart_count;
  }
  if (started || history_changed) {
    // For the next leader, should this one be lost: also a failed round's history (a suspect
    // node, the crash-loop count) while the next round waits out its backoff.
    history_written_ = coordinator.history_version();
    state_.history = coordinator.history();
    state_.restarts = coordinator.restart_count();  // a restart decided, its round not started yet
    ops.push_back(put_op(keys_.state(), etcd::state_value(state_, wall_seconds() - monotonic_seconds()), 0));
  }
  const Json compare = {{{"key", base64_encode(keys_.leader())}, {"target", "VALUE"}, {"value", base64_encode(id_)}}};
  for (std::size_t i = 0; i < ops.size(); i += kMaxTxnOps) {
    Json success = Json::array();
    for (std::size_t j = i; j < std::min(ops.size(), i + kMaxTxnOps); ++j) success.push_back(ops[j]);
    request("/v3/kv/txn", {{"compare", compare}, {"success", success}},
            [this](const Json& answer) {
              if (!answer.value("succeeded", false)) lost_etcd("this node is no longer the rendezvous leader in etcd");
            },
            [this](const EtcdError& e) { lost_etcd(fmt::format("could not write to etcd: {}", e.what())); });
  }
  if (resign) return step_down(std::move(*own_finish));
  if (own_finish) {
    leader_finish_ = own_finish;
    // Every other node got its finish: once they have read it and gone (or close_timeout
    // passed), the job's keys are removed.
    cleanup_timer_.expires_after(seconds(config_.timeouts.close_timeout));
    cleanup_timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
      if (!ec && !alive.expired()) {
        node_ids_.clear();
        clean_up_if_alone();
      }
    });
    clean_up_if_alone();
  }
}

void EtcdRendezvous::step_down(JobOutcome outcome) {
  say("ddprun: this node leads the rendezvous and is quarantined: another node takes the lead over\n");
  host_.reset();  // this deliver() is its transport's: CoordinatorHost expects that
  node_ids_.clear();
  node_names_.clear();
  // Queued after the state's transaction: the lease's revocation deletes the leader key.
  finish_after_revoke(std::move(outcome));
}

void EtcdRendezvous::clean_up_if_alone() {
  if (!leader_finish_ || cleaning_) return;
  for (const auto& [name, id] : node_ids_) {
    if (name != id_) return;
  }
  cleaning_ = true;
  finishing_ = true;  // its own key goes with the others: no loss to report
  cleanup_timer_.cancel();
  if (host_) host_->halt();
  const std::string prefix = keys_.prefix();
  auto done = [this](auto&&...) {
    auto finish = [this](auto&&...) {
      host_.reset();
      end(*leader_finish_);
    };
    request("/v3/lease/revoke", {{"ID", std::to_string(lease_)}}, finish, finish);
  };
  request("/v3/kv/deleterange",
          {{"key", base64_encode(prefix)}, {"range_end", base64_encode(etcd::prefix_end(prefix))}}, done, done);
}

}  // namespace ddprun::elastic
