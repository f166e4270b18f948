#include "round_workers.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include <asio/post.hpp>
#include <fmt/format.h>

#include "ddprun/clocks.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/system.hpp"
#include "output/output_writer.hpp"
#include "report/event_records.hpp"
#include "process/spawn.hpp"
#include "report/failure_report.hpp"
#include "report/job_exit.hpp"
#include "report/worker_end.hpp"
#include "snapshots/snapshot_place.hpp"

namespace ddprun::launcher {

RoundWorkers::RoundWorkers(Context context)
    : c_(std::move(context)),
      group_(c_.io, c_.config, c_.environ, c_.config.worker_argv(c_.python.program), c_.guard, c_.containment,
             c_.paths),
      grace_timer_(c_.io),
      gasp_timer_(c_.io) {}

void RoundWorkers::start(int attempt) {
  if (commits_) commits_->set_round(c_.node.round.round);
  grace_timer_.cancel();
  open_ = true;
  all_ended_ = false;
  starting_ = true;
  const std::uint64_t start = ++starts_;
  const elastic::RoundAssignment& round = c_.node.round;
  if (c_.replication != nullptr && !round.snapshot_peers.empty()) {
    // The folder first: a node that replaces a lost one fetches what the others hold before its
    // workers look for a checkpoint. On the replication's thread, then back on the loop.
    c_.replication->start_round(round.round, round.snapshot_peers,
                                [this, io = &c_.io, start, attempt](elastic::RestoreOutcome outcome) {
                                  asio::post(*io, [this, start, attempt, outcome = std::move(outcome)] {
                                    restored(start, attempt, outcome);
                                  });
                                });
    return;
  }
  if (c_.replication != nullptr && round.group_world_size > 1 && !std::exchange(said_not_replicated_, true)) {
    say(fmt::format("ddprun: snapshots: round {} is not replicated: {}\n", round.round,
                    round.group_world_size > elastic::kMaxSnapshotRing
                        ? fmt::format("it has more than {} nodes", elastic::kMaxSnapshotRing)
                        : std::string("a node of it has no replication (--snapshot=off, or no secret, there)")));
  }
  start_when_warm(attempt);
}

void RoundWorkers::restored(std::uint64_t start, int attempt, const elastic::RestoreOutcome& outcome) {
  for (const std::string& line : outcome.lines) say("ddprun: " + line + "\n");
  if (outcome.fetched > 0 || outcome.removed > 0) {
    say(fmt::format("ddprun: snapshots: {} fetched from the other nodes ({}), {} removed, in {:.2f} s\n",
                    outcome.fetched == 1 ? std::string("1 file") : fmt::format("{} files", outcome.fetched),
                    size_words(outcome.bytes), outcome.removed, outcome.seconds));
  }
  c_.events.write(records::snapshot_restore(c_.node.round.round, outcome.fetched, outcome.removed, outcome.bytes,
                                            outcome.seconds, outcome.lines));
  if (start != starts_ || !starting_) return;  // given up (cancel_start) or started again since
  start_when_warm(attempt);
}

void RoundWorkers::start_when_warm(int attempt) {
  // --warm_start: while the warm interpreter still imports, the workers wait for it rather than
  // start cold beside it (warm_start.hpp says why); the loop goes on meanwhile.
  group_.warm_start().when_ready(c_.io, [this, attempt] { start_now(attempt); });
}

void RoundWorkers::cancel_start() {
  if (!std::exchange(starting_, false)) return;
  group_.warm_start().cancel_wait();
  check_all_ended();
}

void RoundWorkers::arm_grace(double seconds) {
  grace_timer_.expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds)));
  grace_timer_.async_wait([this, round = c_.node.round.round](std::error_code ec) {
    if (!ec && open_ && round == c_.node.round.round) c_.dispatch(occurred::GraceExpired{});
  });
}

void RoundWorkers::gasp(int signal, double grace) {
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &now);  // at or before any file stamp that follows
  Gasp g;
  g.signal = signal;
  g.since = static_cast<double>(now.tv_sec) + now.tv_nsec / 1e9;
  g.at = std::chrono::steady_clock::now();
  g.ranks = group_.gasp(signal);
  gasp_ = std::move(g);
  gasp_timer_.expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(grace)));
  gasp_timer_.async_wait([this, round = c_.node.round.round](std::error_code ec) {
    if (!ec && open_ && gasp_ && round == c_.node.round.round) c_.dispatch(occurred::GaspEnded{});
  });
}

void RoundWorkers::end_gasp(GaspEnd how, int by_signal) {
  if (!gasp_) return;
  gasp_timer_.cancel();
  const Gasp g = std::move(*gasp_);
  gasp_.reset();
  GaspReport r;
  r.signal = g.signal;
  r.ranks = g.ranks;
  r.since = g.since;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - g.at).count();
  r.grace = c_.config.snapshot_grace;
  r.end = how;
  if (by_signal != 0) r.by_signal = signal_name(by_signal);
  for (const auto& w : group_.workers()) {
    if (w->alive && w->sent_gasp != 0) ++r.still_running;
  }
  if (r.ranks.empty()) return;  // no survivor: nothing was asked of anyone
  r.written = written_since(c_.paths.snapshot_dir, g.since);
  say(gasp_line(r));
  c_.events.write(
      records::dying_gasp(r.signal, r.ranks, r.written.files, r.written.bytes,
                          r.written.last ? std::optional(std::max(0.0, *r.written.last - r.since)) : std::nullopt,
                          r.seconds, to_string(how), r.still_running));
}

void RoundWorkers::start_now(int attempt) {
  starting_ = false;
  hangs_->response().start_round(attempt);
  // No worker is forked at or after the fence's deadline: the rendezvous checked it when the
  // round started, but a launcher stopped or stalled since then runs on past it, between two forks.
  const auto start_by = fence_ ? std::optional(fence_->fence) : std::nullopt;
  // The heartbeat files are watched before any worker starts: a fast worker's first beats
  // would otherwise go unseen, and a rank that beat early and then stopped would look like
  // one still starting up (--hang_startup) while its waiting peers were judged hung.
  const auto started = group_.start(
      c_.node.round, attempt, hangs_->timer_file(),
      [this](const auto& files) {
        if (static_cast<int>(files.size()) == c_.config.nproc_per_node) hangs_->watchdog().start_round(files);
      },
      start_by);
  // The host's count only where no cgroup counts the workers' own (add_kind() reads the same one).
  if (const auto memory = c_.containment.memory_events()) {
    oom_kills_at_start_ = memory->oom_kills;
  } else {
    kernel_oom_kills_at_start_ = kernel_oom_kills();
  }
  for (const auto& w : group_.workers()) {
    if (w->pid > 0) c_.events.write(records::worker_started(w->rank, w->local_rank, w->pid, w->forked, w->warm));
  }
  if (started.past_deadline) {
    const std::size_t forked = group_.workers().size();  // those forked before the deadline, no others
    const std::string why =
        "this launcher ran past its fence's deadline (stopped or stalled) while it started its workers: " +
        (forked == 0 ? fmt::format("it started none of its {}", c_.config.nproc_per_node)
         : forked == static_cast<std::size_t>(c_.config.nproc_per_node)
             ? fmt::format("it started all {} (killed now)", forked)
             : fmt::format("it started {} of {} (killed now) and not the others", forked, c_.config.nproc_per_node));
    say("ddprun: " + why + "\n");
    c_.dispatch(occurred::Fenced{why});  // the rendezvous fences as it runs next
  } else if (started.failed) {
    const int error = started.error;
    elastic::WorkerFailure f = identity(*started.failed);
    f.exit_code = (error == ENOENT || error == ENOTDIR) ? exit_code::kNotFound : exit_code::kCannotExecute;
    f.message = fmt::format("could not start {}: {}", c_.config.worker_argv(c_.python.program).front(),
                            std::strerror(error));
    add_kind(f, nullptr, false, is_stopping(c_.phase));
    c_.dispatch(occurred::WorkerFailed{f, std::nullopt});  // stops the workers already started
  }
  c_.dispatch(occurred::WorkersStarted{});
  check_all_ended();
}

void RoundWorkers::check_all_ended() {
  if (!open_ || starting_ || all_ended_ || group_.alive_count() > 0 || hangs_->response().collecting()) return;
  all_ended_ = true;
  c_.dispatch(occurred::AllEnded{});
}

void RoundWorkers::reap(const std::function<bool(pid_t, int)>& claim) {
  // A child that is not a worker: the health check, a stack tool, an orphaned grandchild (ddprun
  // is a subreaper) or the orphan guard.
  auto ended_now = group_.reap([&](pid_t pid, int status) {
    if (!claim(pid, status)) hangs_->response().child_exited(pid);
  });
  // Every close a reaped worker made is queued now: the snapshot folder's watch reads it before
  // anything else happens (a round's end that follows removes what they left half-written).
  if (commits_ && !ended_now.empty()) {
    std::vector<CommitWatch::Worker> ended;
    for (const auto& [worker, status] : ended_now) ended.push_back({worker->pid, worker->rank, WIFSIGNALED(status)});
    commits_->reaped(ended);
  }
  // What they printed last: the stderr tail tells the kind (and a traceback whether a worker
  // that ddprun had signalled failed on its own first), stdout may hold their last steps.
  for (const auto& [worker, status] : ended_now) {
    if (worker->out) worker->out->read_available();
    if (worker->err) worker->err->read_available();
  }
  // Ranks that ended together: one whose peer's connection closed under it goes after the
  // others, so that the rank that died first is the failure and it the consequence, in
  // whatever order they were reaped.
  std::stable_partition(ended_now.begin(), ended_now.end(), [](const auto& e) {
    return !e.first->err || !mentions_lost_peer(e.first->err->tail());
  });
  for (auto [worker, status] : ended_now) {
    worker->alive = false;
    hangs_->watchdog().worker_ended(worker->local_rank);
    ended(*worker, status);
  }
  check_all_ended();
}

void RoundWorkers::ended(WorkerProcess& w, int status) {
  elastic::WorkerFailure f = identity(w);
  WorkerEnd end{status, w.sent_signal, w.sent_kill};
  end.sent_gasp = w.sent_gasp;
  end.past_fence_backstop = fence_ && std::chrono::steady_clock::now() >= fence_->backstop;
  if (status != 0) {  // what tells a failure from ddprun's stop taking effect
    // Error files outlive ddprun in a log folder; the private folder is deleted at exit.
    add_error_file(f, w.error_file, !c_.paths.logs_root.empty());
    end.left_message = !f.message.empty();
    end.raised_on_its_own = w.err && raised_on_its_own({w.err->tail().begin(), w.err->tail().end()});
  }
  const WorkerEndVerdict v = judge_worker_end(end);
  c_.events.write(records::worker_exited(w.rank, w.local_rank, w.pid, v.exit_code, v.signal, v.signalled_by_ddprun));
  if (v.verdict == EndVerdict::kFencedByGuard) {
    const std::string why =
        "this launcher did not run (stopped or stalled) past its fence's deadline: its orphan guard killed the "
        "workers for it";
    say("ddprun: " + why + "\n");
    return c_.dispatch(occurred::Fenced{why});
  }
  if (v.verdict != EndVerdict::kFailed) return c_.dispatch(occurred::WorkerSucceeded{});
  if (w.err && w.err->watch_imports && !w.err->import_error().empty()) {
    const std::string path = find_program(c_.python.program, search_path(c_.environ)).path;
    f.message = import_failure_message(w.err->import_error(), f.message, path.empty() ? c_.python.program : path,
                                       c_.python.chosen_by);
  }
  f.exit_code = v.exit_code;
  f.signal = v.signal;
  f.signal_from_outside = v.signal_from_outside;
  c_.dispatch(occurred::WorkerFailed{
      f, occurred::WorkerFailed::KindEvidence{&w, v.signalled_by_ddprun, is_stopping(c_.phase)}});
}

void RoundWorkers::end_round() {
  if (!open_) return;
  open_ = false;
  grace_timer_.cancel();
  gasp_timer_.cancel();
  gasp_.reset();
  starting_ = false;
  group_.warm_start().cancel_wait();
  hangs_->watchdog().end_round();
  group_.end_round();
  if (commits_) commits_->end_round();  // every worker ended: what is not whole goes
  c_.events.write(records::round_ended(c_.node.round.round));
}

std::vector<CommitWatch::Worker> RoundWorkers::unreaped() const {
  std::vector<CommitWatch::Worker> out;
  for (const auto& w : group_.workers()) {
    if (w->pid > 0 && !w->reaped) out.push_back({w->pid, w->rank, false});
  }
  return out;
}

elastic::WorkerFailure RoundWorkers::identity(const WorkerProcess& w) const {
  elastic::WorkerFailure f;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.group_rank = c_.node.round.group_rank;
  f.host = c_.settings.host;
  f.pid = w.pid;
  f.timestamp = wall_seconds();
  return f;
}

void RoundWorkers::answer_hangs(HangResponse::Handlers& h) {
  h.identity = [this](const WorkerProcess& w) { return identity(w); };
  h.running_round = [this]() -> std::optional<int> {
    if (!is_up(c_.phase)) return std::nullopt;
    return c_.node.round.round;
  };
  h.still_current = [this](int r) { return r == c_.node.round.round && c_.phase != Phase::kExiting; };
  h.failed = [this](const elastic::WorkerFailure& f) { failed(f); };
}

void RoundWorkers::failed(elastic::WorkerFailure failure) {
  add_kind(failure, group_.by_local_rank(failure.local_rank), false, is_stopping(c_.phase));
  c_.dispatch(occurred::WorkerFailed{failure, std::nullopt});
  check_all_ended();  // the last hung rank's failure handed over: the round may be over
}

void RoundWorkers::classify(occurred::WorkerFailed& o) {
  if (o.classified) return;
  if (o.kind_from) {
    add_kind(o.failure, o.kind_from->worker, o.kind_from->stopped_by_ddprun, o.kind_from->after_another_failure);
  }
  o.classified = true;
  ++c_.node.failures_by_kind[o.failure.kind.name()];
}

// The failure's kind (report/failure_classifier.hpp), the step its rank reached and whether this
// node's workers made progress in the round (the restart policy's crash-loop test); then the
// worker_failed record.
void RoundWorkers::add_kind(elastic::WorkerFailure& f, const WorkerProcess* w, bool stopped_by_ddprun,
                            bool after_another_failure) {
  FailureEvidence e = evidence_of(f, stopped_by_ddprun, after_another_failure);
  if (w != nullptr && w->err) e.stderr_tail.assign(w->err->tail().begin(), w->err->tail().end());
  if (const auto memory = c_.containment.memory_events()) {
    e.oom_kills = memory->oom_kills - oom_kills_at_start_;
    e.memory_peak = memory->peak;
  } else if (const auto kernel = kernel_oom_kills(); kernel && kernel_oom_kills_at_start_) {
    e.kernel_oom_kills = *kernel - *kernel_oom_kills_at_start_;
  }
  set_kind(f, classify_failure(e, c_.config.failure_rules));
  const HangPolicy& beats = hangs_->watchdog().policy();
  if (const auto step = beats.last_step(f.local_rank)) f.step = *step;
  f.progressed = false;
  for (int r = 0; r < c_.config.nproc_per_node; ++r) f.progressed = f.progressed || beats.ever_beat(r);
  c_.node.last_failure = failure_view(f);
  c_.events.write(records::worker_failed(f));
}

}  // namespace ddprun::launcher
