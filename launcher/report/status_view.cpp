#include "report/status_view.hpp"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "report/metrics.hpp"

namespace ddprun::launcher {

std::string hung_text(std::string_view phase, bool hang_reported) {
  return hang_reported && phase != "waiting" ? "a worker hung; the job is stopping" : "";
}

void record_beat(JobView& view, int local_rank, double at, std::optional<long long> step,
                 std::optional<double> deadline, double hang_timeout) {
  for (auto& r : view.ranks) {
    if (r.local_rank != local_rank) continue;
    r.last_beat = at;
    r.step = step;
    r.deadline = deadline;
    if (step) r.steps.add(at, *step);
  }
  view.hang_timeout = hang_timeout;
}

void keep_step_histories(JobView& fresh, const JobView& old) {
  for (auto& r : fresh.ranks) {
    for (const auto& o : old.ranks) {
      if (o.local_rank == r.local_rank && o.pid == r.pid) r.steps = o.steps;
    }
  }
}

bool rank_hung(const RankView& rank, double now) { return rank.running && rank.deadline && now >= *rank.deadline; }

std::pair<int, std::string> healthz_response(const JobView& view, double now) {
  if (!view.hung.empty()) return {503, view.hung + "\n"};
  for (const auto& r : view.ranks) {
    if (rank_hung(r, now)) {
      const double since = now - r.last_beat.value_or(*r.deadline - view.hang_timeout);
      return {503, fmt::format("rank {}: no progress for {:.1f} s (hang timeout {:.1f} s)\n", r.rank, since,
                               view.hang_timeout)};
    }
  }
  return {200, "ok\n"};
}

namespace {

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json();
}

// What /status calls a rank's state: running, exited, or starting (no process yet).
const char* rank_state(const RankView& r) { return r.running ? "running" : r.pid > 0 ? "exited" : "starting"; }

}  // namespace

std::string status_json(const JobView& view, double now) {
  nlohmann::json ranks = nlohmann::json::array();
  std::vector<PacedRank> paced;
  for (const auto& r : view.ranks) {
    const RankPace pace = rank_pace(r.steps, now);
    paced.push_back({r.rank, r.running, pace});
    ranks.push_back({
        {"rank", r.rank},
        {"local_rank", r.local_rank},
        {"pid", r.pid},
        {"state", rank_state(r)},
        {"running", r.running},
        {"hung", rank_hung(r, now)},
        {"last_beat_age", r.last_beat ? nlohmann::json(now - *r.last_beat) : nlohmann::json()},
        {"step", r.step ? nlohmann::json(*r.step) : nlohmann::json()},
        {"steps_per_second", optional_json(pace.steps_per_second)},
        {"since_last_step", optional_json(pace.since_last_step)},
        {"step_time", optional_json(pace.step_time)},
    });
  }
  const JobPace job = job_pace(paced);
  const auto [code, health] = healthz_response(view, now);
  nlohmann::json j = {
      {"phase", view.phase},
      {"attempt", view.attempt},
      {"round", view.round},
      {"restart_count", view.restart_count},
      {"restarts_left", std::max(0, view.max_restarts - view.restart_count)},
      {"world_size", view.world_size},
      {"host", view.host},
      {"node_rank", view.node_rank >= 0 ? nlohmann::json(view.node_rank) : nlohmann::json()},
      {"nodes", view.nodes > 0 ? nlohmann::json(view.nodes) : nlohmann::json()},
      {"spare", view.spare > 0 ? nlohmann::json(view.spare) : nlohmann::json()},
      {"waiting_for_nodes", view.waiting_for_nodes.empty() ? nlohmann::json() : nlohmann::json(view.waiting_for_nodes)},
      {"spares", view.spares ? nlohmann::json(*view.spares) : nlohmann::json()},
      {"quarantined", nlohmann::json::array()},
      {"hang_timeout", view.hang_timeout > 0 ? nlohmann::json(view.hang_timeout) : nlohmann::json()},
      {"healthy", code == 200},
      {"total_steps", job.total_steps},
      {"slowest_rank", job.slowest_rank ? nlohmann::json(*job.slowest_rank) : nlohmann::json()},
      {"stragglers", job.stragglers},
      {"median_step_time", optional_json(job.median_step_time)},
      {"ranks", ranks},
      {"last_failure", nlohmann::json()},
      {"restart_reason", view.restart_reason.empty() ? nlohmann::json() : nlohmann::json(view.restart_reason)},
  };
  j["goodput"] = view.goodput ? goodput_json(view.goodput->figures(now)) : nlohmann::json();
  for (const auto& [node, why] : view.quarantined) j["quarantined"].push_back({{"node", node}, {"why", why}});
  if (const auto& f = view.last_failure) {
    j["last_failure"] = {{"rank", f->rank},          {"host", f->host}, {"exit_code", f->exit_code},
                         {"kind", f->kind},          {"retryable", f->retryable}, {"cause", f->cause}};
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string http_response(std::string_view head, const JobView& view, double now) {
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const auto first = line.find(' ');
  const auto second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  int code = 400;
  std::string body = "not an HTTP request\n";
  std::string type = "text/plain";
  std::string extra;
  bool head_only = false;
  if (second != std::string_view::npos && line.substr(second + 1).rfind("HTTP/1.", 0) == 0 &&
      line.find(' ', second + 1) == std::string_view::npos) {
    const std::string_view method = line.substr(0, first);
    std::string_view target = line.substr(first + 1, second - first - 1);
    target = target.substr(0, target.find('?'));
    head_only = method == "HEAD";
    if (method != "GET" && !head_only) {
      std::tie(code, body) = std::pair(405, "only GET and HEAD\n");
      extra = "Allow: GET, HEAD\r\n";
    } else if (target == "/healthz") {
      std::tie(code, body) = healthz_response(view, now);
    } else if (target == "/status") {
      std::tie(code, body) = std::pair(200, status_json(view, now));
      type = "application/json";
    } else if (target == "/metrics") {
      std::tie(code, body) = std::pair(200, metrics_text(view, now));
      type = kMetricsContentType;
    } else {
      std::tie(code, body) = std::pair(404, "not found: ddprun serves /status, /healthz and /metrics\n");
    }
  }
  const char* reason = code == 200 ? "OK" : code == 503 ? "Service Unavailable" : code == 404 ? "Not Found"
                       : code == 405 ? "Method Not Allowed" : "Bad Request";
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
                     code, reason, type, body.size(), extra, head_only ? "" : body);
}

}  // namespace ddprun::launcher
