#include "report/job_page.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun::launcher {
namespace {

using nlohmann::json;

constexpr double kWidth = 1000;  // the drawings' width in pixels
constexpr double kLeft = 130;    // their left margin, for the lanes' names
constexpr double kRight = 20;

constexpr const char* kStyle = R"(<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1040px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}
.figures span{display:inline-block;margin-right:24px}.figures b{font-size:18px}
.note{background:#fff6d8;border:1px solid #e8d48a;padding:6px 10px;margin:6px 0}
.ett{font-size:28px;font-weight:bold}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.cause{max-width:520px;word-break:break-word}
svg text{font:12px system-ui,sans-serif;fill:#222}
.legend span{display:inline-block;margin-right:14px}.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
</style>)";

// The colours of the timeline's parts and the goodput bar's, the same for the same part.
constexpr const char* kRound = "#4a78c8";
constexpr const char* kStarting = "#b0b0b0";
constexpr const char* kRecovering = "#f0a030";
constexpr const char* kWaiting = "#d8d8d8";
constexpr const char* kFailure = "#d02020";
constexpr const char* kTraining = "#3a9a4a";

std::string seconds(double s) {
  if (std::fabs(s) < 100) return fmt::format("{:.1f} s", s);
  if (std::fabs(s) < 6000) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

// A tick's label in the unit of the ticks' step: 30 s, 2 min, 6 h (never 1.7 min for 100 s).
std::string tick_label(double t, double step) {
  if (step < 60) return fmt::format("{:g} s", t);
  if (step < 3600) return fmt::format("{:g} min", t / 60);
  return fmt::format("{:g} h", t / 3600);
}

std::string utc(double epoch) {
  const std::time_t t = static_cast<std::time_t>(epoch);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buffer;
}

std::string rank_colour(int rank) { return fmt::format("hsl({},65%,42%)", (rank * 137) % 360); }

const char* wait_colour(const std::string& what) {
  if (what == "starting") return kStarting;
  if (what == "recovering") return kRecovering;
  return kWaiting;
}

// The time axis shared by the drawings: seconds since the job's start to x.
struct Axis {
  double span;
  double x(double t) const { return kLeft + std::clamp(t / span, 0.0, 1.0) * (kWidth - kLeft - kRight); }
  // About 8 ticks, at steps a reader counts in: 1, 2 or 5 times a power of ten below a minute,
  // then whole minutes, hours and days.
  std::string ticks(double top, double bottom) const {
    // No std::pow or std::log10: ddprun links no libm (tests/launcher/libraries_test.sh).
    const double raw = std::max(span / 8, 1e-3);
    double decade = 1;  // the power of ten at or below raw
    while (decade > raw) decade /= 10;
    while (decade * 10 <= raw) decade *= 10;
    double step = decade * 10;
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
      if (decade * m >= raw) {
        step = decade * m;
        break;
      }
    }
    if (raw > 30) {
      step = 30;
      for (double s : {60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}) {
        step = s;
        if (s >= raw) break;
      }
      if (raw > 86400) step = std::ceil(raw / 86400) * 86400;
    }
    std::string out;
    for (double t = 0; t <= span * 1.0001; t += step) {
      out += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#e4e4e4"/>)"
                         R"(<text x="{0:.1f}" y="{3}" text-anchor="middle">{4}</text>)",
                         x(t), top, bottom, bottom + 14, html_escape(tick_label(t, step)));
    }
    return out;
  }
};

std::string legend_item(const char* colour, const std::string& label) {
  return fmt::format(R"(<span><i class="swatch" style="background:{}"></i>{}</span>)", colour, html_escape(label));
}

std::string notes(const JobModel& job) {
  std::string out;
  const auto note = [&](const std::string& line) { out += "<p class=\"note\">" + html_escape(line) + "</p>\n"; };
  if (!job.finished()) {
    std::string missing;
    for (const auto& n : job.nodes) {
      if (job.exits.count(n) == 0) missing += (missing.empty() ? "" : ", ") + n;
    }
    note(
        fmt::format("No exit record of {}: the job was still running when the log was read, or its ddprun was "
                    "killed. The page shows the job up to the log's last record.",
                    missing));
  }
  if (job.last_line_cut) note("The log's last line was cut short (being written, or its writer killed): left out.");
  if (job.unreadable > 0) note(fmt::format("{} lines of the file are no event log record: left out.", job.unreadable));
  if (job.earlier_jobs > 0) {
    note(fmt::format("The file holds {} earlier jobs (--event_log appends): this page is of the last one.",
                     job.earlier_jobs));
  }
  return out;
}

std::string goodput(const JobModel& job) {
  std::string out = "<h2>Goodput</h2>\n";
  if (job.goodput.empty()) {
    return out +
           "<p>No goodput record: no rank made progress that ddprun could see, or the log is of a ddprun "
           "without the goodput ledger.</p>\n";
  }
  for (const auto& entry : job.goodput) {
    const auto& node = entry.first;
    const auto& g = entry.second;  // a reference, not a structured binding: lambdas capture it (C++17)
    const auto number = [&](const char* key) {
      return g.contains(key) && g[key].is_number() ? g[key].get<double>() : 0.0;
    };
    const bool known = g.contains("ett_percent") && g["ett_percent"].is_number();
    const bool bound = g.contains("ett_upper_bound") && g["ett_upper_bound"] == true;
    out += fmt::format(
        R"(<p><b>{}</b> ({}): <span class="ett" id="ett-{}">{}</span><br><span class="summary">{}</span></p>)",
        html_escape(node), html_escape(g.value("why", std::string())), html_escape(node),
        known ? fmt::format("{}{:.1f}%", bound ? "at most " : "", number("ett_percent")) : "unknown",
        html_escape(g.contains("summary") && g["summary"].is_string() ? g["summary"].get<std::string>() : ""));
    const double wall = std::max(number("wall_seconds"), 1e-9);
    std::string bar;
    double x = 0;
    const std::pair<const char*, const char*> parts[] = {{"starting_seconds", kStarting},
                                                         {"training_seconds", kTraining},
                                                         {"recovering_seconds", kRecovering},
                                                         {"idle_seconds", kWaiting}};
    for (const auto& [key, colour] : parts) {
      const double w = number(key) / wall * kWidth;
      bar += fmt::format(R"(<rect x="{:.1f}" y="0" width="{:.1f}" height="22" fill="{}"><title>{}: {}</title></rect>)",
                         x, w, colour, key, html_escape(seconds(number(key))));
      x += w;
    }
    out += fmt::format(R"(<svg width="{}" height="22" role="img" aria-label="where the wall time went">{}</svg>)",
                       kWidth, bar);
    out += "<div class=\"legend\">";
    out += legend_item(kStarting, "starting " + seconds(number("starting_seconds")));
    out += legend_item(kTraining, "training " + seconds(number("training_seconds")));
    out += legend_item(kRecovering, "recovering " + seconds(number("recovering_seconds")));
    out += legend_item(kWaiting, "idle " + seconds(number("idle_seconds")));
    if (g.contains("work_redone_seconds")) {
      out += g["work_redone_seconds"].is_number()
                 ? "<span>work redone " + seconds(number("work_redone_seconds")) + "</span>"
                 : "<span>work redone unknown</span>";
    }
    out += "</div>\n";
  }
  return out;
}

std::string timeline(const JobModel& job, const Axis& axis, const PageLimits& limits) {
  constexpr double kLane = 44;
  const double height = 20 + kLane * static_cast<double>(job.nodes.size()) + 24;
  std::string svg;
  svg += axis.ticks(10, height - 24);
  std::size_t labelled = 0;
  for (std::size_t i = 0; i < job.nodes.size(); ++i) {
    const std::string& node = job.nodes[i];
    const double y = 20 + kLane * static_cast<double>(i);
    svg += fmt::format(R"(<text x="4" y="{}">{}</text>)", y + 18,
                       html_escape(node.size() > 18 ? node.substr(0, 17) + "…" : node));
    for (const auto& w : job.waits) {
      if (w.node != node) continue;
      svg += fmt::format(
          R"(<rect class="wait" x="{:.1f}" y="{}" width="{:.1f}" height="10" fill="{}"><title>{} {} – {}</title></rect>)",
          axis.x(w.start), y + 8, std::max(axis.x(w.end) - axis.x(w.start), 1.0), wait_colour(w.what),
          html_escape(w.what), html_escape(seconds(w.start)), html_escape(seconds(w.end)));
    }
    int shade = 0;
    for (const auto& r : job.rounds) {
      if (r.node != node) continue;
      const double from = r.workers_started.value_or(r.start);
      const double to = r.end.value_or(job.end - job.start);
      const double x = axis.x(from), w = std::max(axis.x(to) - x, 1.0);
      svg += fmt::format(R"(<rect class="round" x="{:.1f}" y="{}" width="{:.1f}" height="26" fill="{}" opacity="{}">)"
                         R"(<title>round {} (restart {}, world size {}): {} – {}{}</title></rect>)",
                         x, y, w, kRound, shade++ % 2 == 0 ? "1" : "0.75", r.round, r.restart_count, r.world_size,
                         html_escape(seconds(from)), html_escape(seconds(to)), r.end ? "" : ", still running");
      if (w > 56)
        svg += fmt::format(R"(<text x="{:.1f}" y="{}" style="fill:#fff">round {}</text>)", x + 4, y + 17, r.round);
    }
    for (const auto& m : job.marks) {
      if (m.node != node) continue;
      const bool training = m.event == "goodput";
      svg += fmt::format(R"(<rect x="{:.1f}" y="{}" width="3" height="8" fill="{}"><title>{}: {}</title></rect>)",
                         axis.x(m.time) - 1.5, training ? y + 26 : y - 8, training ? kTraining : "#555",
                         html_escape(seconds(m.time)), html_escape(m.text));
    }
    for (const auto& f : job.failures) {
      if (f.node != node) continue;
      const double x = axis.x(f.time);
      svg += fmt::format(
          R"(<path d="M{0:.1f} {1} l-6 -9 h12 z" fill="{2}"><title>{3}: rank {4} failed: {5}: {6}</title></path>)"
          R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{7}" stroke="{2}" stroke-width="2"/>)",
          x, y, kFailure, html_escape(seconds(f.time)), f.rank, html_escape(f.kind), html_escape(f.cause), y + 26);
      if (labelled++ < limits.labels) {
        const bool right = x > kWidth - 150;  // near the right edge: the label ends at the mark
        svg += fmt::format(
            R"(<text class="failure" x="{:.1f}" y="{}" text-anchor="{}" style="fill:{}">rank {} {}</text>)",
            right ? x - 4 : x + 4, y + 38, right ? "end" : "start", kFailure, f.rank, html_escape(f.kind));
      }
    }
  }
  std::string out = "<h2>Timeline</h2>\n";
  out += fmt::format(R"(<svg id="timeline" width="{}" height="{}" role="img" aria-label="the job's timeline">{}</svg>)",
                     kWidth, height, svg);
  out += "<div class=\"legend\">" + legend_item(kRound, "workers running (a round)") +
         legend_item(kStarting, "starting") + legend_item(kRecovering, "recovering after a failure") +
         legend_item(kWaiting, "waiting") + legend_item(kFailure, "failure (rank, kind)") +
         legend_item(kTraining, "every rank made progress") + legend_item("#555", "other event (hover for it)") +
         "</div>\n";
  return out;
}

std::string progress(const JobModel& job, const Axis& axis, const PageLimits& limits) {
  std::string out = "<h2>Progress of each rank</h2>\n";
  if (job.ranks.empty()) {
    return out +
           "<p>No progress record in the log: no rank beat (a program without torch.distributed, the "
           "worker library or DDPRUN_HEARTBEAT_FILE), or a ddprun older than its progress records.</p>\n";
  }
  const bool steps = std::all_of(job.ranks.begin(), job.ranks.end(), [](const auto& r) { return r.second.steps; });
  double top = 1;
  for (const auto& [rank, p] : job.ranks) {
    for (const auto& s : p.samples) top = std::max(top, s.value);
  }
  constexpr double kTop = 10, kHeight = 220;
  const auto y = [&](double v) { return kTop + kHeight - v / top * kHeight; };
  std::string svg = axis.ticks(kTop, kTop + kHeight);
  svg += fmt::format(R"(<text x="4" y="{}">{}</text><text x="4" y="{}">0</text>)", kTop + 10, top, kTop + kHeight);
  svg += fmt::format(R"(<text x="4" y="{}">{}</text>)", kTop + kHeight / 2, steps ? "step" : "beats");
  std::string legend;
  std::size_t drawn = 0, thinned = 0;
  for (const auto& [rank, p] : job.ranks) {
    if (drawn++ >= limits.ranks) break;
    const auto points = downsample_progress(p.samples, limits.points_per_rank);
    if (points.size() < p.samples.size()) ++thinned;
    const std::string colour = rank_colour(rank);
    // One line a run of the rank: a restart's fall back to 0 is a new line, not a slope.
    for (std::size_t i = 0; i < points.size();) {
      std::string path;
      std::size_t n = 0;
      for (const int run = points[i].run; i < points.size() && points[i].run == run; ++i, ++n) {
        path += fmt::format("{:.1f},{:.1f} ", axis.x(points[i].time), y(points[i].value));
      }
      svg += fmt::format(
          R"(<polyline class="rank" points="{}" fill="none" stroke="{}" stroke-width="1.5"><title>rank {} ({})</title></polyline>)",
          path, colour, rank, html_escape(p.node));
      if (n == 1) {
        svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2" fill="{}"/>)", axis.x(points[i - 1].time),
                           y(points[i - 1].value), colour);
      }
    }
    legend += fmt::format(R"(<span><i class="swatch" style="background:{}"></i>rank {}</span>)", colour, rank);
  }
  out += fmt::format(
      R"(<svg id="progress" width="{}" height="{}" role="img" aria-label="each rank's progress">{}</svg>)", kWidth,
      kTop + kHeight + 24, svg);
  out += "<div class=\"legend\">" + legend + "</div>\n";
  out += fmt::format(
      "<p>{}, from the event log's progress records (a rank's first beat of a round, then one every "
      "1 s to 60 s as the round ages); a restart starts again from 0.",
      steps ? "The step each rank's worker reported" : "The beats ddprun saw of each rank in the round");
  if (job.ranks.size() > limits.ranks)
    out += fmt::format(" Ranks drawn: the lowest {} of {}.", limits.ranks, job.ranks.size());
  if (thinned > 0) {
    out += fmt::format(" {} ranks thinned to at most {} points each (each stretch's lowest and highest).", thinned,
                       limits.points_per_rank);
  }
  return out + "</p>\n";
}

template <typename Rows, typename Row>
std::string table(const char* id, const std::string& head, const Rows& rows, std::size_t limit, Row row) {
  std::string out = fmt::format("<table id=\"{}\"><tr>{}</tr>\n", id, head);
  std::size_t n = 0;
  for (const auto& r : rows) {
    if (n++ >= limit) break;
    out += "<tr>" + row(r) + "</tr>\n";
  }
  out += "</table>\n";
  if (rows.size() > limit) out += fmt::format("<p>The first {} rows of {}.</p>\n", limit, rows.size());
  return out;
}

std::string cell(const std::string& text) { return "<td>" + html_escape(text) + "</td>"; }

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string job_page(const JobModel& job, const std::string& title, const PageLimits& limits) {
  const double span = std::max(job.end - job.start, 1.0);
  const Axis axis{span};
  std::string outcome;
  if (job.finished()) {
    for (const auto& [node, code] : job.exits)
      outcome += fmt::format("{}{} exited {}", outcome.empty() ? "" : ", ", node, code);
  } else {
    outcome = "no exit record (running or killed)";
  }
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  out += "<title>ddprun report: " + html_escape(title) + "</title>\n" + kStyle + "</head><body>\n";
  out += "<h1>ddprun report: " + html_escape(job.program.empty() ? title : job.program) + "</h1>\n";
  out += fmt::format("<p>{} · started {} · {} node(s): {}</p>\n", html_escape(title), html_escape(utc(job.start)),
                     job.nodes.size(), html_escape(fmt::format("{}", fmt::join(job.nodes, ", "))));
  out += fmt::format(
      R"(<p class="figures"><span>rounds <b id="rounds">{}</b></span><span>failures <b id="failures">{}</b></span>)"
      R"(<span>length <b id="length">{}</b></span><span>outcome <b id="outcome">{}</b></span></p>)",
      job.round_count(), job.failures.size(), html_escape(seconds(job.end - job.start)), html_escape(outcome));
  out += "\n" + notes(job) + goodput(job) + timeline(job, axis, limits) + progress(job, axis, limits);
  out += "<h2>Failures</h2>\n";
  out += job.failures.empty()
             ? std::string("<p>None.</p>\n")
             : table("failure-table",
                     "<th>at</th><th>node</th><th>round</th><th>rank</th><th>kind</th><th>exit code</th><th>cause</th>",
                     job.failures, limits.rows, [](const JobModel::Failure& f) {
                       return cell(seconds(f.time)) + cell(f.node) + cell(std::to_string(f.round)) +
                              cell(std::to_string(f.rank)) + cell(f.kind) +
                              cell(f.exit_code ? std::to_string(*f.exit_code) : "-") + "<td class=\"cause\">" +
                              html_escape(f.cause) + "</td>";
                     });
  out += "<h2>Events</h2>\n";
  out += table("event-table", "<th>at</th><th>node</th><th>event</th>", job.marks, limits.rows,
               [](const JobModel::Mark& m) { return cell(seconds(m.time)) + cell(m.node) + cell(m.text); });
  out += fmt::format("<p>Times are from the job's first record ({}). Made by ddprun report from {} records.</p>\n",
                     html_escape(utc(job.start)), job.records);
  return out + "</body></html>\n";
}

}  // namespace ddprun::launcher
