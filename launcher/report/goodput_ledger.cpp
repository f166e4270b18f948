#include "report/goodput_ledger.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace ddprun::launcher {

void GoodputLedger::close(double t) {
  buckets_[static_cast<int>(state_)] += std::max(0.0, t - since_);
  since_ = std::max(since_, t);
}

void GoodputLedger::decide_redone(GoodputFailure& f) const {
  f.decided = true;
  if (f.training_since < 0) {
    f.redone = 0.0;  // no training since the last progress began: nothing more was lost
  } else if (snapshots_ && last_commit_) {
    // The workers resume from the last commit: what was trained after it (and after this
    // stretch began: what came before was counted by an earlier failure) is done again.
    const double from = std::max(*last_commit_ - start_, f.training_since);
    f.redone = std::max(0.0, f.at - from);
  } else {
    f.redone.reset();  // no commit seen: the job may keep checkpoints elsewhere, or none
  }
}

void GoodputLedger::workers_started(double t, int ranks) {
  ranks_ = std::max(ranks, 0);
  progressed_.assign(static_cast<size_t>(ranks_), false);
  running_ = ranks_ > 0;
  failed_this_round_ = false;
  for (auto& f : failures_) {
    if (!f.waited) f.waited = t - start_ - f.at;
    if (!f.decided) decide_redone(f);  // what this round restores from is committed by now
  }
}

const char* GoodputLedger::progress(double t, int local_rank) {
  if (!running_ || state_ == State::kTraining || local_rank < 0 || local_rank >= ranks_) return nullptr;
  progressed_[static_cast<size_t>(local_rank)] = true;
  if (std::find(progressed_.begin(), progressed_.end(), false) != progressed_.end()) return nullptr;
  const char* ended = state_ == State::kStarting ? "started" : state_ == State::kRecovering ? "recovered" : "resumed";
  if (state_ == State::kStarting) time_to_start_ = t - start_;
  for (auto& f : failures_) {
    if (!f.recovered_in) f.recovered_in = t - start_ - f.at;
  }
  close(t);
  state_ = State::kTraining;
  return ended;
}

void GoodputLedger::failure(double t, const std::string& kind, bool injected) {
  if (failed_this_round_) return;
  failed_this_round_ = true;
  GoodputFailure f;
  f.at = t - start_;
  f.kind = kind;
  f.injected = injected;
  if (state_ == State::kTraining) f.training_since = since_ - start_;
  running_ = false;
  if (state_ != State::kStarting) {  // a failure before the first progress is part of the start
    close(t);
    state_ = State::kRecovering;
  }
  failures_.push_back(std::move(f));
}

void GoodputLedger::stopped(double t) {
  running_ = false;
  if (state_ != State::kTraining) return;
  close(t);
  state_ = State::kIdle;
}

GoodputFigures GoodputLedger::figures(double now) const {
  GoodputFigures g;
  GoodputLedger open = *this;
  open.close(now);
  g.wall = std::max(0.0, now - start_);
  g.starting = open.buckets_[0];
  g.training = open.buckets_[1];
  g.recovering = open.buckets_[2];
  g.idle = open.buckets_[3];
  g.time_to_start = time_to_start_;
  g.failures = failures_;
  for (const auto& f : g.failures) {
    ++g.failures_by_kind[f.kind];
    if (f.injected) ++g.injected;
    // Undecided: no round followed it (yet), so nothing was redone (yet).
    if (!f.decided) continue;
    if (f.redone) {
      g.redone += *f.redone;
    } else {
      ++g.redone_unknown;
    }
  }
  if (time_to_start_ && g.wall > 0) {
    const double productive = std::max(0.0, g.training - g.redone);
    g.ett = 100.0 * productive / g.wall;
    g.ett_upper_bound = g.redone_unknown > 0;
  }
  return g;
}

namespace {

std::string seconds(double s) { return fmt::format("{:.1f} s", s); }

std::string kinds_text(const std::map<std::string, int>& by_kind) {
  std::vector<std::pair<std::string, int>> kinds(by_kind.begin(), by_kind.end());
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text;
  for (const auto& [kind, n] : kinds) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}", n, kind == kAnotherNode ? "on another node" : kind);
  }
  return text;
}

nlohmann::json optional_number(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

std::string goodput_text(const GoodputFigures& f) {
  if (!f.ett) {
    return "goodput unknown: no rank made progress that ddprun could see (a beat: a collective through "
           "the Python bootstrap, the worker library, --progress_pattern)";
  }
  std::string line = fmt::format("goodput {}{:.1f}%: started in {}", f.ett_upper_bound ? "at most " : "",
                                 *f.ett, seconds(*f.time_to_start));
  if (f.failures.empty()) {
    line += ", no failures";
  } else {
    line += fmt::format(", {} failure{} ({}) cost {}", f.failures.size(), f.failures.size() == 1 ? "" : "s",
                        kinds_text(f.failures_by_kind) +
                            (f.injected > 0 ? fmt::format("; {} injected by --chaos", f.injected) : std::string()),
                        seconds(f.recovering));
    if (f.redone_unknown > 0) {
      line += f.redone > 0 ? fmt::format(", {} of work redone and more unknown", seconds(f.redone))
                           : std::string(", work redone unknown");
      line += " (no checkpoint committed to DDPRUN_SNAPSHOT_DIR)";
    } else {
      line += fmt::format(", {} of work redone", seconds(f.redone));
    }
  }
  if (f.idle >= 0.05) line += fmt::format(", {} idle", seconds(f.idle));
  return line;
}

nlohmann::json goodput_json(const GoodputFigures& f) {
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& x : f.failures) {
    failures.push_back({{"at", x.at},
                        {"kind", x.kind},
                        {"waited", optional_number(x.waited)},
                        {"time_to_recover", optional_number(x.recovered_in)},
                        {"work_redone", x.decided ? optional_number(x.redone) : nlohmann::json(0.0)},
                        {"injected", x.injected}});
  }
  return {{"ett_percent", optional_number(f.ett)},
          {"ett_upper_bound", f.ett_upper_bound},
          {"wall_seconds", f.wall},
          {"time_to_start", optional_number(f.time_to_start)},
          {"starting_seconds", f.starting},
          {"training_seconds", f.training},
          {"recovering_seconds", f.recovering},
          {"idle_seconds", f.idle},
          {"work_redone_seconds", f.redone_unknown > 0 ? nlohmann::json() : nlohmann::json(f.redone)},
          {"work_redone_known_seconds", f.redone},
          {"work_redone_unknown", f.redone_unknown},
          {"failures_by_kind", f.failures_by_kind},
          {"failures_injected", f.injected},
          {"failures", std::move(failures)},
          {"summary", goodput_text(f)}};
}

EventRecord goodput_record(const GoodputFigures& f, std::string_view why) {
  nlohmann::json fields = goodput_json(f);
  fields["why"] = why;
  return {"goodput", std::move(fields)};
}

}  // namespace ddprun::launcher
