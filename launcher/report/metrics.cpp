#include "report/metrics.hpp"

#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>


namespace ddprun::launcher {

namespace {

// `text` as valid UTF-8, bytes that are not replaced by U+FFFD: nlohmann's serializer does the
// replacing, its parser takes the JSON string back.
std::string valid_utf8(std::string_view text) {
  const std::string quoted =
      nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(quoted).get<std::string>();
}

// The escapes of the text format: \\ and \n in HELP text; also \" in label values.
std::string escaped(std::string_view text, bool quote) {
  std::string out;
  for (const char c : valid_utf8(text)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

struct Sample {
  std::string labels;  // `{name="value",...}` or ""
  std::string value;
};

class Exposition {
 public:
  // One family; left out when it has no sample.
  void family(std::string_view name, std::string_view type, std::string_view help, const std::vector<Sample>& samples) {
    if (samples.empty()) return;
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escaped(help, false), name, type);
    for (const auto& s : samples) text_ += fmt::format("{}{} {}\n", name, s.labels, s.value);
  }
  void single(std::string_view name, std::string_view type, std::string_view help, std::string value) {
    family(name, type, help, {{"", std::move(value)}});
  }
  std::string text() && { return std::move(text_); }

 private:
  std::string text_;
};

std::string labels(std::initializer_list<std::pair<std::string_view, std::string>> pairs) {
  std::string out;
  for (const auto& [name, value] : pairs) out += fmt::format("{}{}=\"{}\"", out.empty() ? "{" : ",", name, escape_label_value(value));
  return out + "}";
}

// A value as Prometheus parses it (Go's ParseFloat): the shortest text that reads back the same.
std::string number(double value) { return fmt::format("{}", value); }

// The goodput ledger's figures (report/goodput_ledger.hpp); a figure not known yet is left out.
void goodput_families(Exposition& out, const GoodputFigures& g) {
  if (g.ett) {
    out.single("ddprun_goodput_ratio", "gauge",
               "Effective training time over wall time on this node (ETT%/100; an upper bound while work redone is unknown).",
               number(*g.ett / 100));
  }
  if (g.time_to_start) {
    out.single("ddprun_goodput_time_to_start_seconds", "gauge",
               "ddprun's start to the first progress of every rank of this node.", number(*g.time_to_start));
  }
  out.family("ddprun_goodput_seconds_total", "counter",
             "This node's wall time by what it went to: starting, training, recovering, idle.",
             {{labels({{"state", "starting"}}), number(g.starting)},
              {labels({{"state", "training"}}), number(g.training)},
              {labels({{"state", "recovering"}}), number(g.recovering)},
              {labels({{"state", "idle"}}), number(g.idle)}});
  if (g.redone_unknown == 0) {
    out.single("ddprun_goodput_work_redone_seconds_total", "counter",
               "Training time lost to failures and done again (from the snapshot folder's commits).", number(g.redone));
  }
  std::vector<Sample> failures;
  for (const auto& [kind, n] : g.failures_by_kind) failures.push_back({labels({{"kind", kind}}), std::to_string(n)});
  out.family("ddprun_goodput_failures_total", "counter",
             "Failures that stopped this node's training, by kind (another_node: a failure seen as the round's stop).",
             failures);
  out.single("ddprun_goodput_failures_injected_total", "counter",
             "Failures of this node that --chaos injected (a rehearsal); each also counted by its kind.",
             std::to_string(g.injected));
  for (auto f = g.failures.rbegin(); f != g.failures.rend(); ++f) {
    if (!f->recovered_in) continue;
    out.single("ddprun_goodput_last_time_to_recover_seconds", "gauge",
               "The last recovered failure to the first progress of every rank after it.", number(*f->recovered_in));
    break;
  }
}

}  // namespace

std::string escape_label_value(std::string_view value) { return escaped(value, true); }

std::string metrics_text(const JobView& view, double now) {
  Exposition out;
  out.family("ddprun_info", "gauge", "ddprun's version, the job's run id (--rdzv_id) and this node's host name.",
             {{labels({{"version", DDPRUN_VERSION}, {"run_id", view.run_id}, {"host", view.host}}), "1"}});
  out.single("ddprun_restarts_total", "counter",
              "Restarts of the job after a failure so far, job-wide (TORCHELASTIC_RESTART_COUNT).",
              std::to_string(view.restart_count));
  out.single("ddprun_rounds_total", "counter", "Rounds in which this node started its workers.",
              std::to_string(view.rounds_started));
  int running = 0;
  for (const auto& r : view.ranks) running += r.running ? 1 : 0;
  out.single("ddprun_workers_running", "gauge", "This node's workers running now.", std::to_string(running));
  out.single("ddprun_healthy", "gauge",
              "1 while every rank of this node made progress within the hang timeout (GET /healthz 200), else 0.",
              healthz_response(view, now).first == 200 ? "1" : "0");
  out.single("ddprun_hangs_total", "counter",
              "Hangs this node found (--hang_timeout, torchelastic timers): one a round, however many ranks hung.",
              std::to_string(view.hangs_found));
  std::vector<Sample> failures;
  for (const auto& [kind, count] : view.failures) failures.push_back({labels({{"kind", kind}}), std::to_string(count)});
  out.family("ddprun_worker_failures_total", "counter", "Failures of this node's workers, by kind.", failures);
  if (view.nodes > 0) {
    out.single("ddprun_nodes", "gauge", "Nodes in the job this round (GROUP_WORLD_SIZE).", std::to_string(view.nodes));
    out.single("ddprun_node_rank", "gauge", "This node's rank in the job this round (GROUP_RANK).",
                std::to_string(view.node_rank));
    out.single("ddprun_world_size", "gauge", "Workers in the job this round (WORLD_SIZE).",
                std::to_string(view.world_size));
  }
  if (view.hang_timeout > 0) {
    out.single("ddprun_hang_timeout_seconds", "gauge",
                "The hang timeout in force (--hang_timeout, or what auto learned).", number(view.hang_timeout));
  }
  std::vector<Sample> steps;
  std::vector<Sample> ages;
  for (const auto& r : view.ranks) {
    const std::string rank = labels({{"rank", std::to_string(r.rank)}, {"local_rank", std::to_string(r.local_rank)}});
    if (r.step) steps.push_back({rank, std::to_string(*r.step)});
    if (r.last_beat) ages.push_back({rank, number(now - *r.last_beat)});
  }
  out.family("ddprun_rank_steps_total", "counter",
              "The rank's last step (its progress record, the worker library, or a --progress_pattern).", steps);
  out.family("ddprun_rank_last_progress_age_seconds", "gauge", "Seconds since the rank last made progress (a beat).",
              ages);
  if (view.goodput) goodput_families(out, view.goodput->figures(now));
  return std::move(out).text();
}

}  // namespace ddprun::launcher
