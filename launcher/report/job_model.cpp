#include "report/job_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/user_error.hpp"

namespace ddprun::launcher {
namespace {

using nlohmann::json;

// A field as the record should hold it; the default where it is missing or of another type
// (a log of another version, a line edited by hand).
std::string text(const json& j, const char* key, const std::string& otherwise = "") {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : otherwise;
}
std::optional<double> number(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
int integer(const json& j, const char* key, int otherwise = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : otherwise;
}
std::string figure(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "?";
  if (it->is_number_float()) return fmt::format("{:.1f}", it->get<double>());
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

// What a mark says of a record; "" for records that are no mark.
std::string mark_text(const std::string& event, const json& r) {
  if (event == "restart") {
    // The reason says it all ("restart 1 of 3 after rank 1 on h1: ..."); the numbers where it is missing.
    const std::string reason = text(r, "reason");
    if (text(r, "decision") == "restart") {
      return reason.empty() ? fmt::format("restart {} of {}", figure(r, "restart_count"), figure(r, "max_restarts"))
                            : reason;
    }
    return "no restart: " + reason;
  }
  if (event == "stop_requested") return fmt::format("round {} stopped: {}", figure(r, "round"), text(r, "why"));
  if (event == "hang") {
    return fmt::format("rank {} hung: silent for {} s (timeout {} s)", figure(r, "rank"), figure(r, "silent_for"),
                       figure(r, "hang_timeout"));
  }
  if (event == "quiet") return fmt::format("rank {} quiet for {} s", figure(r, "rank"), figure(r, "silent_for"));
  if (event == "signal_received") return fmt::format("signal {} received", figure(r, "signal"));
  if (event == "spare") return fmt::format("hot spare (place {}): {}", figure(r, "place"), text(r, "why"));
  if (event == "quarantined") return fmt::format("{} quarantined: {}", figure(r, "node"), text(r, "why"));
  if (event == "health_check") return fmt::format("health check {}: {}", text(r, "result"), text(r, "what"));
  if (event == "dying_gasp") {
    return fmt::format("dying gasp: {} files, {} bytes written in {} s", figure(r, "files"), figure(r, "bytes"),
                       figure(r, "seconds"));
  }
  if (event == "snapshot_restore") {
    return fmt::format("snapshot folder restored: {} files fetched, {} removed", figure(r, "fetched"),
                       figure(r, "removed"));
  }
  if (event == "heartbeats_missing") return fmt::format("no rank beat within {} s", figure(r, "after"));
  if (event == "timer_expired") return fmt::format("torchelastic timer of pid {} expired", figure(r, "pid"));
  if (event == "goodput") {
    const std::string why = text(r, "why");
    if (why == "started") return "every rank made progress: training";
    if (why == "recovered") return "every rank made progress again: recovered";
    if (why == "resumed") return "every rank made progress again: resumed";
    return "";
  }
  if (event == "exit") return fmt::format("ddprun exited with code {}", figure(r, "exit_code"));
  return "";
}

class Reader {
 public:
  void add(const json& r) {
    const std::string event = text(r, "event");
    const std::string node = text(r, "node");
    const double t = *number(r, "time");
    if (event == "started" && nodes_seen_.count(node) > 0) {
      const int earlier = job_.earlier_jobs + 1;
      const std::size_t unreadable = job_.unreadable;
      *this = Reader();
      job_.earlier_jobs = earlier;
      job_.unreadable = unreadable;
    }
    if (nodes_seen_.insert(node).second) job_.nodes.push_back(node);
    ++job_.records;
    first_ = std::min(first_, t);
    last_ = std::max(last_, t);
    Node& n = state_[node];
    if (event == "started") {
      job_.program = text(r, "program");
      open_wait(n, node, "starting", t, -1);
    } else if (event == "round_started") {
      n.round = static_cast<int>(job_.rounds.size());
      job_.rounds.push_back(
          {node, integer(r, "round"), integer(r, "restart_count"), integer(r, "world_size"), t, {}, {}});
      if (!n.waiting) open_wait(n, node, "waiting", t, -1);
    } else if (event == "worker_started") {
      if (n.waiting) {
        job_.waits[n.wait].end = t;
        n.waiting = false;
      }
      if (n.round >= 0 && !job_.rounds[n.round].workers_started) job_.rounds[n.round].workers_started = t;
      ++runs_[integer(r, "rank")];
    } else if (event == "worker_failed") {
      const int round = n.round >= 0 ? job_.rounds[n.round].round : 0;
      failed_rounds_.insert(round);
      job_.failures.push_back({node, t, round, integer(r, "rank", -1), text(r, "kind", "?"),
                               number(r, "exit_code") ? std::optional<int>(integer(r, "exit_code")) : std::nullopt,
                               text(r, "cause")});
    } else if (event == "round_ended") {
      if (n.round >= 0) {
        job_.rounds[n.round].end = t;
        if (!n.waiting) open_wait(n, node, "waiting", t, job_.rounds[n.round].round);
      }
    } else if (event == "progress") {
      auto& p = job_.ranks[integer(r, "rank")];
      p.rank = integer(r, "rank");
      p.node = node;
      const auto step = number(r, "step");
      if (!step) p.steps = false;
      p.samples.push_back({t, step ? *step : number(r, "beats").value_or(0), std::max(runs_[p.rank] - 1, 0)});
    } else if (event == "goodput") {
      job_.goodput[node] = r;
    } else if (event == "exit") {
      job_.exits[node] = integer(r, "exit_code", -1);
      if (n.waiting) {
        job_.waits[n.wait].end = t;
        n.waiting = false;
      }
    }
    const std::string said = mark_text(event, r);
    if (!said.empty()) job_.marks.push_back({node, t, event, said});
  }

  JobModel finish(std::size_t unreadable, bool last_line_cut) {
    JobModel job = std::move(job_);
    job.unreadable += unreadable;
    job.last_line_cut = last_line_cut;
    job.start = first_;
    job.end = last_;
    const auto since = [&](double& t) { t -= first_; };
    for (auto& r : job.rounds) {
      since(r.start);
      if (r.workers_started) since(*r.workers_started);
      if (r.end) since(*r.end);
    }
    for (std::size_t i = 0; i < job.waits.size(); ++i) {
      auto& w = job.waits[i];
      if (std::isnan(w.end)) w.end = last_;  // still waiting at the log's end
      since(w.start);
      since(w.end);
      if (wait_after_[i] >= 0) w.what = failed_rounds_.count(wait_after_[i]) > 0 ? "recovering" : "waiting";
    }
    for (auto& f : job.failures) since(f.time);
    for (auto& m : job.marks) since(m.time);
    for (auto& [rank, p] : job.ranks) {
      for (auto& s : p.samples) since(s.time);
      std::stable_sort(p.samples.begin(), p.samples.end(),
                       [](const auto& a, const auto& b) { return a.time < b.time; });
    }
    return job;
  }

 private:
  struct Node {
    int round = -1;  // index in rounds
    bool waiting = false;
    std::size_t wait = 0;  // index in waits while waiting
  };
  // `after_round`: the round whose end began it (its kind decided at the end, when every node's
  // failures are known); -1: `what` as given.
  void open_wait(Node& n, const std::string& node, const char* what, double t, int after_round) {
    n.waiting = true;
    n.wait = job_.waits.size();
    job_.waits.push_back({node, what, t, std::numeric_limits<double>::quiet_NaN()});
    wait_after_.push_back(after_round);
  }

  JobModel job_;
  std::set<std::string> nodes_seen_;
  std::map<std::string, Node> state_;
  std::set<int> failed_rounds_;
  std::vector<int> wait_after_;  // by wait
  std::map<int, int> runs_;      // by rank: its workers started
  double first_ = std::numeric_limits<double>::infinity();
  double last_ = -std::numeric_limits<double>::infinity();
};

bool is_record(const json& j) {
  return j.is_object() && j.contains("event") && j["event"].is_string() && j.contains("time") &&
         j["time"].is_number() && std::isfinite(j["time"].get<double>()) && j.contains("node") && j["node"].is_string();
}

}  // namespace

int JobModel::round_count() const {
  std::set<int> numbers;
  for (const auto& r : rounds) numbers.insert(r.round);
  return static_cast<int>(numbers.size());
}

JobModel read_job(std::istream& in, const std::string& where) {
  Reader reader;
  std::size_t lines = 0, records = 0, unreadable = 0;
  bool last_line_cut = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++lines;
    const json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && is_record(j)) {
      reader.add(j);
      ++records;
    } else if (in.eof()) {
      last_line_cut = true;  // getline met the end before a newline: the line is being written, or was cut
    } else {
      ++unreadable;
    }
  }
  if (records == 0) {
    if (lines == 0)
      throw UserError(fmt::format("report {}: the file is empty; give the file of --event_log", shown(where)));
    throw UserError(
        fmt::format("report {}: not an event log of ddprun (none of its {} lines is a JSON record with "
                    "\"event\", \"time\" and \"node\"); give the file of --event_log",
                    shown(where), lines));
  }
  return reader.finish(unreadable, last_line_cut);
}

std::vector<JobModel::Sample> downsample_progress(const std::vector<JobModel::Sample>& samples,
                                                  std::size_t max_points) {
  if (samples.size() <= max_points || max_points < 2) return samples;
  const std::size_t buckets = max_points / 2;
  const double from = samples.front().time;
  const double span = samples.back().time - from;
  std::vector<JobModel::Sample> out;
  std::size_t i = 0;
  for (std::size_t b = 0; b < buckets && i < samples.size(); ++b) {
    const double until = b + 1 == buckets ? std::numeric_limits<double>::infinity() : from + span * (b + 1) / buckets;
    std::size_t low = i, high = i;
    for (; i < samples.size() && samples[i].time < until; ++i) {
      if (samples[i].value < samples[low].value) low = i;
      if (samples[i].value >= samples[high].value) high = i;
    }
    if (i == low && i == high) continue;  // an empty stretch: `low` is the next one's
    out.push_back(samples[std::min(low, high)]);
    if (low != high) out.push_back(samples[std::max(low, high)]);
  }
  return out;
}

}  // namespace ddprun::launcher
