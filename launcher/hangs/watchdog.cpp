#include "hangs/watchdog.hpp"

#include <chrono>

#include "ddprun/clocks.hpp"

namespace ddprun::launcher {

Watchdog::Watchdog(asio::io_context& io, config::HangTimeout setting, double quiet_after,
                   const std::string& timer_file, Handlers handlers, bool beats_used, UniqueFd heartbeat_watch)
    : timer_(io), policy_(setting, quiet_after), handlers_(std::move(handlers)) {
  // Beats feed the hang timeout, the quiet warning, the status server's view and warm start.
  // Without any no watch is made. The quiet warning is on by default (--hang_timeout off), so a
  // default run watches them.
  if (policy_.enabled() || policy_.warns_quiet() || beats_used) {
    files_ = std::make_unique<HeartbeatFiles>(io, std::move(heartbeat_watch),
                                              [this](int local_rank) { file_beat(local_rank); });
  }
  if (!timer_file.empty()) {
    file_timers_ = std::make_unique<FileTimerServer>(io, timer_file, [this](const ExpiredTimer& expired) {
      if (judging_) handlers_.timer_expired(expired);
    });
  }
}

void Watchdog::start_round(const std::vector<std::string>& heartbeat_files) {
  policy_.start_round(static_cast<int>(heartbeat_files.size()), monotonic_seconds());
  for (size_t i = 0; files_ && i < heartbeat_files.size(); ++i) files_->watch(static_cast<int>(i), heartbeat_files[i]);
  records_.start_round(heartbeat_files);
  judging_ = true;
  arm();
}

void Watchdog::end_round() {
  judging_ = false;
  records_.end_round();
  if (files_) files_->clear();
  if (file_timers_) file_timers_->clear();
  timer_.cancel();
  armed_for_.reset();
}

std::optional<double> Watchdog::deadline(int local_rank) const {
  if (!judging_ || !policy_.enabled() || policy_.output_held(local_rank)) return std::nullopt;
  const double timeout = policy_.timeout();
  if (timeout <= 0) return std::nullopt;
  const double now = monotonic_seconds();
  return now - policy_.silent_for(local_rank, now) + timeout;
}

void Watchdog::progress(int local_rank, std::optional<long long> step) {
  if (step) pattern_steps_ = true;
  beat(local_rank, step);
}

std::optional<long long> Watchdog::step_of(const ProgressRecord& record) const {
  if (pattern_steps_) return std::nullopt;
  return record.step;
}

std::vector<ProgressRecord> Watchdog::read_records() {
  auto records = records_.read_all();
  for (size_t i = 0; i < records.size(); ++i) {
    if (const auto step = step_of(records[i])) policy_.step_recorded(static_cast<int>(i), *step);
  }
  return records;
}

HungRank Watchdog::standing(int local_rank) const { return policy_.standing(local_rank, monotonic_seconds()); }

void Watchdog::file_beat(int local_rank) { beat(local_rank, step_of(records_.read(local_rank))); }

void Watchdog::beat(int local_rank, std::optional<long long> step) {
  if (!judging_) return;
  const double now = monotonic_seconds();
  const auto learned = policy_.beat(local_rank, now, step);
  if (handlers_.beat) handlers_.beat(local_rank, now);
  if (learned && handlers_.learned) handlers_.learned(*learned);
  // A beat only moves deadlines later, except the first beats and a newly learned timeout.
  const auto next = policy_.next_check(now);
  if (next && (!armed_for_ || *next < *armed_for_)) arm();
}

void Watchdog::output_paused(int local_rank, bool paused) {
  if (!judging_) return;
  policy_.output_paused(local_rank, paused, monotonic_seconds());
  arm();  // a held rank has no deadline; a released one a later one
}

void Watchdog::worker_ended(int local_rank) {
  if (!judging_) return;
  policy_.ended(local_rank);
  arm();  // its deadline may have been the next one
}

void Watchdog::arm() {
  // Off, the timer is for the quiet warning only (the policy's next_check() says when).
  if (!judging_) return;
  const double now = monotonic_seconds();
  armed_for_ = policy_.next_check(now);
  if (!armed_for_) {
    timer_.cancel();
    return;
  }
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(*armed_for_ - now)));
  timer_.async_wait([this](std::error_code ec) {
    if (!ec) check();
  });
}

void Watchdog::check() {
  armed_for_.reset();
  if (!judging_) return;
  const double now = monotonic_seconds();
  if (policy_.missing_heartbeats(now) && handlers_.missing) handlers_.missing(policy_.silent_for(0, now));  // no rank beat: the time since the start
  auto quiet = policy_.quiet(now);
  auto hung = policy_.hung(now);
  if (quiet.empty() && hung.empty()) {
    arm();
    return;
  }
  // A rank's last step is in its record now, which may be past what its last beat said.
  const auto records = read_records();
  for (auto& q : quiet) q.last_step = policy_.last_step(q.local_rank);
  for (auto& h : hung) h.last_step = policy_.last_step(h.local_rank);
  if (!quiet.empty() && handlers_.quiet) handlers_.quiet(quiet);
  if (!hung.empty()) {
    judging_ = false;
    handlers_.hung(hung, records);
    return;
  }
  arm();
}

}  // namespace ddprun::launcher
