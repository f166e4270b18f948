#include "hangs/hang_watch.hpp"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "ddprun/parse.hpp"
#include "ddprun/worker_env.hpp"
#include "hangs/stack_dump.hpp"
#include "process/spawn.hpp"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

// How long the stack tools may take for all workers together before they are killed.
constexpr double kStackDumpTimeout = 60;

}  // namespace

double quiet_warning_seconds(const std::map<std::string, std::string>& environ) {
  const auto it = environ.find(env::kQuietWarningSeconds);
  if (it == environ.end()) return kQuietWarning;
  return config::parse_seconds(env::kQuietWarningSeconds, it->second, config::Zero::kRefused);
}

std::string timer_file_path(const std::map<std::string, std::string>& environ, const std::string& files_root) {
  const auto enabled = environ.find(env::kEnableFileTimer);
  if (enabled == environ.end() || enabled->second != "1") return "";
  const auto given = environ.find(env::kTimerFile);
  if (given != environ.end() && !given->second.empty()) return given->second;
  return (fs::path(files_root) / "watchdog_timer").string();
}

HangWatch::HangWatch(asio::io_context& io, const config::LaunchConfig& config,
                     const std::map<std::string, std::string>& environ, const WorkerGroup& group,
                     const RunPaths& paths, const std::string& python, bool beats_used, UniqueFd heartbeat_watch,
                     Hooks hooks)
    : group_(group), hooks_(std::move(hooks)), timer_file_(timer_file_path(environ, paths.files_root())) {
  try {
    const fs::path folder = fs::path(timer_file_).parent_path();
    if (!folder.empty()) fs::create_directories(folder);
    watchdog_ = std::make_unique<Watchdog>(io, config.hang_timeout, quiet_warning_seconds(environ), timer_file_,
                                           watchdog_handlers(), beats_used, std::move(heartbeat_watch));
  } catch (const std::system_error& e) {
    throw config::UsageError(fmt::format("{}={}: {} (with {}=1)", env::kTimerFile, timer_file_, e.code().message(),
                                         env::kEnableFileTimer));
  }
  std::vector<std::string> environ_list;
  for (const auto& [name, value] : environ) environ_list.push_back(name + "=" + value);
  const auto setting = environ.find(env::kPySpy);
  const std::string path = search_path(environ);
  const auto py_spy = py_spy_places(setting != environ.end() ? setting->second : "", python, path);
  HangResponse::Handlers h = hooks_.response;
  // Which ranks the others wait for: from the progress records (hangs/culprit.hpp).
  h.standing = [this](int local_rank) { return watchdog_->standing(local_rank); };
  response_ = std::make_unique<HangResponse>(io, group, find_stack_tools(path, py_spy), std::move(environ_list),
                                             kStackDumpTimeout, paths.logs_root, std::move(h));
}

RankView HangWatch::rank_view(const WorkerProcess& w, bool running) const {
  RankView r;
  r.rank = w.rank;
  r.local_rank = w.local_rank;
  r.pid = w.pid;
  r.running = w.alive;
  if (running) {
    r.last_beat = watchdog_->policy().last_beat(w.local_rank);
    r.step = watchdog_->policy().last_step(w.local_rank);
  }
  r.deadline = watchdog_->deadline(w.local_rank);
  return r;
}

template <typename Respond>
void HangWatch::count_hang(Respond&& respond) {
  const bool before = response_->reported();
  respond();
  if (before || !response_->reported()) return;
  ++hangs_found_;
  hooks_.changed();
}

Watchdog::Handlers HangWatch::watchdog_handlers() {
  Watchdog::Handlers h;
  h.hung = [this](const std::vector<HungRank>& hung, const std::vector<ProgressRecord>& records) {
    count_hang([&] { response_->ranks_hung(hung, "", records); });
  };
  h.timer_expired = [this](const ExpiredTimer& expired) { count_hang([&] { response_->timer_expired(expired); }); };
  h.beat = [this](int local_rank, double at) {
    hooks_.beat(local_rank, at, watchdog_->policy().last_step(local_rank), watchdog_->deadline(local_rank),
                watchdog_->policy().timeout());
  };
  h.quiet = [this](const std::vector<QuietRank>& quiet) {
    for (const auto& q : quiet) {
      const WorkerProcess* w = group_.by_local_rank(q.local_rank);
      if (w == nullptr || !w->alive) continue;
      hooks_.response.say(quiet_warning(w->rank, q));
      hooks_.response.record(records::quiet(w->rank, w->local_rank, q.silent_for, q.last_step));
    }
  };
  h.learned = [this](double timeout) {
    hooks_.response.record(records::hang_timeout_learned(timeout));
    hooks_.changed();
  };
  h.missing = [this](double after) {
    hooks_.response.say(fmt::format("ddprun: no worker touched its DDPRUN_HEARTBEAT_FILE in {:.0f} s: "
                                    "--hang_timeout=auto cannot judge this program (the worker library beats by "
                                    "itself; other programs touch the file at each step)\n",
                                    after));
    hooks_.response.record(records::heartbeats_missing(after));
  };
  return h;
}

}  // namespace ddprun::launcher
