#include "hangs/hang_response.hpp"

#include <unistd.h>

#include <signal.h>

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/clocks.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/system.hpp"
#include "process/process_tree.hpp"
#include "report/event_records.hpp"
#include "report/failure_report.hpp"

namespace ddprun::launcher {

elastic::WorkerFailure hung_failure(elastic::WorkerFailure base, const HungRank& hung, const std::string& why,
                                    double now) {
  elastic::WorkerFailure f = std::move(base);
  f.hung = true;
  f.exit_code = exit_code::kHung;
  f.timestamp = now - hung.silent_for;
  const std::string step = hung.last_step ? fmt::format("; last step {}", *hung.last_step) : "";
  f.message = !why.empty()       ? why
              : hung.ever_beat ? fmt::format("no progress for {:.1f} s (hang timeout {:.1f} s{})", hung.silent_for,
                                             hung.timeout, step)
                               : fmt::format("no heartbeat since it started {:.1f} s ago (--hang_startup={:g})",
                                             hung.silent_for, hung.timeout);
  return f;
}

std::string culprit_message(const std::string& why, const HungRank& culprit) {
  if (!culprit.ever_beat) return fmt::format("{}; no progress since it started {:.1f} s ago", why, culprit.silent_for);
  return fmt::format("{}; no progress for {:.1f} s (hang timeout {:.1f} s{})", why, culprit.silent_for, culprit.timeout,
                     culprit.last_step ? fmt::format("; last step {}", *culprit.last_step) : "");
}

std::string quiet_warning(int rank, const QuietRank& quiet) {
  return fmt::format("ddprun: rank {} made no progress for {:.0f} s{}; with --hang_timeout off ddprun only warns, "
                     "once (--hang_timeout=auto would stop the job and restart it)\n",
                     rank, quiet.silent_for, quiet.last_step ? fmt::format(" (last step {})", *quiet.last_step) : "");
}

HungRank timer_hang(int local_rank, double expired_at, double now) {
  HungRank h;
  h.local_rank = local_rank;
  h.silent_for = now - expired_at;
  h.ever_beat = true;
  return h;
}

WorkerProcess* timer_owner(const std::vector<std::unique_ptr<WorkerProcess>>& workers, pid_t pid) {
  WorkerProcess* owner = nullptr;
  for (const auto& w : workers) {
    if (w->alive && !w->reaped && (w->pid == pid || ::getpgid(pid) == w->pid)) owner = w.get();
  }
  return owner;
}

std::vector<StackDumper::Target> stack_targets(const std::vector<elastic::WorkerFailure>& failures,
                                               const std::vector<std::unique_ptr<WorkerProcess>>& workers) {
  std::vector<StackDumper::Target> targets;
  for (const auto& f : failures) {
    const auto w = std::find_if(workers.begin(), workers.end(),
                                [&](const auto& w) { return w->local_rank == f.local_rank; });
    const bool known = w != workers.end();
    targets.push_back({f.rank, f.pid, known ? (*w)->stacks_file : "", 0, known ? (*w)->python_stacks_file : ""});
  }
  for (const auto& w : workers) {
    const bool listed = std::any_of(failures.begin(), failures.end(), [&](const auto& f) { return f.rank == w->rank; });
    if (w->alive && !listed && !w->stacks_file.empty()) {
      targets.push_back({w->rank, w->pid, w->stacks_file, 0, w->python_stacks_file});
    }
  }
  return targets;
}

std::string hang_announcement(const std::vector<elastic::WorkerFailure>& failures, std::size_t targets) {
  std::string ranks_text;
  for (const auto& f : failures) ranks_text += fmt::format("{}{}", ranks_text.empty() ? "" : ", ", f.rank);
  return fmt::format("ddprun: rank{} {} hung: {}; collecting the stacks of {} worker{}\n",
                     failures.size() > 1 ? "s" : "", ranks_text, failures.front().message, targets,
                     targets == 1 ? "" : "s");
}

std::string where_stuck(const std::string& stacks, pid_t pid, const std::string& missing_tools,
                        const std::string& logs_root, int attempt) {
  const auto frames = top_frames(stacks, pid, kSummaryFrames);
  std::string text;
  if (!frames.empty()) {
    text = "stuck in (main thread, innermost first):";
    for (const auto& frame : frames) text += "\n  " + frame;
  } else {
    text = "no stack collected" + (missing_tools.empty() ? "" : ": " + missing_tools);
  }
  if (!logs_root.empty()) text += fmt::format("\nstacks of every worker: {}/attempt_{}/rank_*/stacks.txt", logs_root, attempt);
  else text += "\n(run with --log_dir to keep the stacks of every worker)";
  return text;
}

HangResponse::HangResponse(asio::io_context& io, const WorkerGroup& group, StackTools tools,
                           std::vector<std::string> environ, double stack_timeout, std::string logs_root,
                           Handlers handlers)
    : group_(group),
      stacks_(std::make_unique<StackDumper>(io, std::move(tools), std::move(environ), stack_timeout)),
      logs_root_(std::move(logs_root)),
      handlers_(std::move(handlers)) {}

HangResponse::~HangResponse() = default;

void HangResponse::start_round(int attempt) {
  attempt_ = attempt;
  reported_ = false;
}

bool HangResponse::child_exited(pid_t pid) { return stacks_->child_exited(pid); }

void HangResponse::timer_expired(const ExpiredTimer& expired) {
  handlers_.record(records::timer_expired(expired.pid, expired.scope_id, expired.signal));
  if (expired.signal <= 0) return;  // a timer without a signal only reports, as in torchrun
  const WorkerProcess* owner = timer_owner(group_.workers(), expired.pid);
  if (owner == nullptr) {
    ::kill(expired.pid, expired.signal);
    return;
  }
  ranks_hung({timer_hang(owner->local_rank, expired.expired_at, wall_seconds())},
             fmt::format("its torchelastic timer '{}' expired", expired.scope_id), {});
}

std::vector<RankCollectives> HangResponse::collectives(const std::vector<ProgressRecord>& records) const {
  std::vector<RankCollectives> out;
  for (const auto& w : group_.workers()) {
    if (!w->alive || w->local_rank < 0 || static_cast<size_t>(w->local_rank) >= records.size()) continue;
    out.push_back(rank_collectives(w->rank, records[static_cast<size_t>(w->local_rank)]));
  }
  return out;
}

HangResponse::Blame HangResponse::blame(const std::vector<HungRank>& hung, const std::string& why,
                                        const std::vector<ProgressRecord>& records) const {
  Blame b{hung, why, std::nullopt, ""};
  if (!why.empty() || !handlers_.standing) return b;  // an expired timer names its rank itself
  const auto culprits = find_culprits(collectives(records));
  if (!culprits) return b;
  if (culprits->ranks.empty()) {
    b.note = culprits->why;
    b.victims = true;
    return b;
  }
  const double now = wall_seconds();
  b.ranks.clear();
  b.why = culprits->why;
  for (const auto& w : group_.workers()) {
    const int rank = w->rank;
    const HungRank standing = handlers_.standing(w->local_rank);
    const auto has = [rank](const std::vector<int>& ranks) {
      return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
    };
    if (has(culprits->ranks)) b.ranks.push_back(standing);
    if (has(culprits->waiting)) b.waited_since = std::min(b.waited_since.value_or(now), now - standing.silent_for);
  }
  return b;
}

void HangResponse::ranks_hung(const std::vector<HungRank>& hung, const std::string& why,
                              const std::vector<ProgressRecord>& records) {
  const std::optional<int> round = handlers_.running_round();
  if (!round || reported_) return;
  reported_ = true;
  const Blame blamed = blame(hung, why, records);
  std::vector<elastic::WorkerFailure> failures;
  for (const auto& h : blamed.ranks) {
    const WorkerProcess* w = group_.by_local_rank(h.local_rank);
    if (w == nullptr || !w->alive) continue;
    failures.push_back(hung_failure(handlers_.identity(*w), h,
                                    blamed.waited_since ? culprit_message(blamed.why, h) : blamed.why, wall_seconds()));
    // Failures are ordered by time on every node. The culprit failed at the latest when the
    // others began to wait for it; ranks that only wait, for a rank of another node, failed when
    // found (their last beats, up to 100 ms apart, would race with the culprit's).
    if (blamed.waited_since) failures.back().timestamp = std::min(failures.back().timestamp, *blamed.waited_since);
    if (blamed.victims) failures.back().timestamp = wall_seconds();
    handlers_.record(
        records::hang(w->rank, w->local_rank, w->pid, h.silent_for, h.timeout, h.last_step, failures.back().message));
  }
  if (failures.empty()) return;
  auto targets = stack_targets(failures, group_.workers());
  for (auto& t : targets) t.python = python_process(t.pid);
  handlers_.say(hang_announcement(failures, targets.size()));
  if (!blamed.note.empty()) handlers_.say(fmt::format("ddprun: {}\n", blamed.note));
  say_missing_tools(targets);
  pending_ = std::move(failures);
  stacks_->dump(targets, [this, round = *round, targets] { stacks_collected(round, targets); });
}

void HangResponse::say_once(const std::string& missing) {
  if (missing.empty() || !said_missing_.insert(missing).second) return;
  handlers_.say(fmt::format("ddprun: {}\n", missing));
}

void HangResponse::say_missing_tools(const std::vector<StackDumper::Target>& targets) {
  say_once(stacks_->tools().native_missing);
  if (std::any_of(targets.begin(), targets.end(), [](const auto& t) { return t.python != 0 && t.python_stacks.empty(); })) {
    say_once(stacks_->tools().python_missing);
  }
}

void HangResponse::say_missing_python_stacks(const std::vector<StackDumper::Target>& targets) {
  for (const auto& t : targets) {
    if (t.python == 0 || t.python_stacks.empty()) continue;
    if (!has_python_frames(read_file(t.file).value_or(""), t.stacked())) say_once(stacks_->tools().python_missing);
  }
}

void HangResponse::stacks_collected(int round, const std::vector<StackDumper::Target>& targets) {
  if (!handlers_.still_current(round)) {
    pending_.clear();
    return;
  }
  say_missing_python_stacks(targets);
  const bool kept = !logs_root_.empty();
  for (const auto& t : targets) {
    handlers_.record(records::stacks_written(t.rank, t.pid, kept ? t.file : ""));
  }
  // One at a time off pending_: collecting() stays true until the last is handed over.
  while (!pending_.empty()) {
    elastic::WorkerFailure f = std::move(pending_.front());
    pending_.erase(pending_.begin());
    const auto t = std::find_if(targets.begin(), targets.end(), [&](const auto& t) { return t.rank == f.rank; });
    const StackDumper::Target target = t != targets.end() ? *t : StackDumper::Target{f.rank, f.pid, "", 0, ""};
    const std::string stacks = read_file(target.file).value_or("");
    f.traceback = traceback_tail(
        where_stuck(stacks, target.stacked(), stacks_->tools().missing(target.python != 0), logs_root_, attempt_));
    handlers_.failed(f);
  }
}

}  // namespace ddprun::launcher
