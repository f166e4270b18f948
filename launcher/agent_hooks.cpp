// Agent::Impl's hooks: what the parts the agent watches tell it (hangs and beats, the snapshot
// folder's commits, signals, the health check) and the live view it publishes (agent_impl.hpp).
#include <fmt/format.h>

#include "agent_impl.hpp"
#include "report/event_records.hpp"
#include "report/node_record.hpp"
#include "snapshots/snapshot_handover.hpp"

namespace ddprun::launcher {

void Agent::Impl::run_health_check() {
  workers_.end_round();  // the last round's processes gone first: a GPU check needs its GPUs free
  if (!health_.configured()) return dispatch(occurred::HealthCheckPassed{});
  const std::string& run_id = node_.round_assigned ? node_.round.run_id : settings_.configured_run_id;
  health_.start(health_check_variables(config_, node_.attempts_started, node_.round, run_id));
}

void Agent::Impl::health_check_ended(HealthCheckReport report) {
  events_.write(records::health_check(report));
  switch (report.verdict.action) {
    case HealthAction::kWarnAndJoin: say(health_check_warning(report)); [[fallthrough]];
    case HealthAction::kJoin: return dispatch(occurred::HealthCheckPassed{});
    case HealthAction::kQuarantine: return dispatch(occurred::HealthCheckFailed{std::move(report)});
  }
}

void Agent::Impl::log_quarantined(const std::vector<elastic::QuarantinedNode>& all) {
  for (const auto& q : note_quarantined(node_, all)) events_.write(records::quarantined(q));
}

HangWatch::Hooks Agent::Impl::hang_hooks() {
  HangWatch::Hooks h;
  h.response.say = [](const std::string& text) { say(text); };
  h.response.record = [this](EventRecord record) { events_.write(std::move(record)); };
  h.changed = [this] { publish_status(); };
  h.beat = [this](int local_rank, double at, std::optional<long long> step, std::optional<double> deadline,
                  double timeout) {
    workers_.group().warm_start().workers_progressed();
    if (auto r = samples_.beat(workers_.group().workers()[local_rank]->rank, local_rank, at, step)) events_.write(*r);
    if (const char* why = goodput_.progress(at, local_rank)) {
      events_.write(goodput_record(goodput_.figures(at), why));
      publish_status();
      if (chaos_) chaos_->training_started();
    }
    if (status_) status_->update([&](JobView& view) { record_beat(view, local_rank, at, step, deadline, timeout); });
  };
  workers_.answer_hangs(h.response);
  return h;
}

CommitWatch::Hooks Agent::Impl::commit_hooks() {
  CommitWatch::Hooks h;
  h.workers = [this] { return workers_.unreaped(); };
  h.say = [](const std::string& line) { say(line); };
  h.removed = [this](const std::vector<Uncommitted>& files) {
    std::vector<std::pair<std::string, std::string>> list;
    for (const auto& f : files) list.emplace_back(f.path, uncommitted_why(f));
    events_.write(records::snapshots_removed(node_.round.round, list));
    if (replication_ != nullptr) hand_over_swept(files, *replication_);
  };
  // The ledger's last commit; in a job of several nodes, what is committed or removed goes to
  // the other nodes' folders.
  h.changed = [this](const std::vector<SnapshotChange>& changes) {
    for (const auto& c : changes) {
      if (c.kind == SnapshotChange::Kind::kCommitted) goodput_.committed(monotonic_seconds());
    }
    if (replication_ != nullptr) hand_over(changes, snapshots_.path(), *replication_);
  };
  return h;
}

void Agent::Impl::publish_status() {
  if (!status_) return;
  node_.hangs_found = hangs_->hangs_found();
  std::vector<RankView> ranks;
  for (const auto& w : workers_.group().workers()) ranks.push_back(hangs_->rank_view(*w, is_up(phase_)));
  JobView view = job_view(node_, status_name(phase_), settings_, hangs_->watchdog().policy().timeout(),
                          hangs_->response().reported(), std::move(ranks));
  view.goodput = goodput_;
  status_->publish(std::move(view));
}

void Agent::Impl::shut_down(int sig) {
  events_.write(records::signal_received(sig));
  dispatch(occurred::ShutdownSignal{sig});
}

SignalChannel::Handlers Agent::Impl::signal_handlers() {
  SignalChannel::Handlers h;
  h.child_exited = [this] { workers_.reap([this](pid_t pid, int status) { return health_.reaped(pid, status); }); };
  h.shutdown = [this](int sig) { shut_down(sig); };
  h.forward = [this](int sig, pid_t sender) {
    // --signals_to_handle naming SIGUSR1/2: torchrun's behaviour, forwarded, then the job stops.
    if (config_.stop_signals.count(sig) > 0) return shut_down(sig);
    const bool forward = !sent_by_slurmstepd(sender);
    events_.write(records::signal_forwarded(sig, forward));
    if (forward) workers_.group().forward(sig);  // SIGUSR1/2: e.g. checkpoint before preemption; workers go on
  };
  return h;
}

ChaosInjector::Hooks Agent::Impl::chaos_hooks() {
  ChaosInjector::Hooks h;
  h.training = [this] { return goodput_.training(); };
  h.worker = [this](int local_rank) -> pid_t {
    for (const auto& w : workers_.group().workers()) {
      if (w->local_rank == local_rank && w->alive && !w->reaped) return w->pid;
    }
    return 0;
  };
  h.injected = [this](const ChaosFault& fault, ChaosKind kind, pid_t pid, double at) {
    const int rank = node_.round.base_rank + fault.local_rank;
    const char* what = kind == ChaosKind::kKill   ? "SIGKILL"
                       : kind == ChaosKind::kHang ? "SIGSTOP"
                                                  : "SIGKILL this ddprun and";
    say(fmt::format("ddprun: --chaos: injected a {} fault at {:.1f} s: {} rank {} (local rank {}{})\n",
                    chaos_kind_name(kind), at, what, rank, fault.local_rank,
                    pid > 0 ? fmt::format(", pid {}", pid) : std::string()));
    events_.write(records::chaos_fault(chaos_kind_name(kind), rank, fault.local_rank, pid, fault.due, at));
    if (kind == ChaosKind::kNode) writers_->finish(std::chrono::seconds(2));  // written before the kill
  };
  return h;
}

}  // namespace ddprun::launcher
