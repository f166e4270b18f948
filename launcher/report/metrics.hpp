// GET /metrics: the job's live view (status_view.hpp) in Prometheus' text exposition format,
// version 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/): each family a
// `# HELP` and a `# TYPE` line, then its samples; counters end in `_total`, durations in
// `_seconds`; no timestamps (Prometheus stamps each scrape). Families are those of this node:
//   ddprun_info{version,run_id,host} 1       gauge
//   ddprun_restarts_total                    counter  job-wide restarts so far
//   ddprun_rounds_total                      counter  rounds this node started workers in
//   ddprun_workers_running                   gauge
//   ddprun_healthy                           gauge    1 while /healthz says 200
//   ddprun_hangs_total                       counter  rounds in which this node found a hang
//   ddprun_worker_failures_total{kind}       counter  by kind (ddprun/failure_kind.hpp)
//   ddprun_nodes, ddprun_node_rank, ddprun_world_size   gauges  the rendezvous' round
//   ddprun_hang_timeout_seconds              gauge    while a timeout is in force
//   ddprun_rank_steps_total{rank,local_rank}            counter  its last step
//   ddprun_rank_last_progress_age_seconds{rank,local_rank}  gauge  since its last beat
//   ddprun_goodput_ratio, ddprun_goodput_time_to_start_seconds  gauges  the goodput ledger's
//   ddprun_goodput_seconds_total{state}, ddprun_goodput_work_redone_seconds_total,
//   ddprun_goodput_failures_total{kind}     counters
//   ddprun_goodput_last_time_to_recover_seconds  gauge
// A family with no sample (no rank has a step yet, no round yet) is left out.
#pragma once

#include <string>
#include <string_view>

#include "report/status_view.hpp"

namespace ddprun::launcher {

// What the client libraries send with format 0.0.4.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// The exposition of `view` at `now` (monotonic seconds).
std::string metrics_text(const JobView& view, double now);

// A label value as the format writes it between its quotes: backslash, double quote and line
// feed escaped (\\, \", \n), bytes that are not UTF-8 replaced by U+FFFD (the format is UTF-8).
std::string escape_label_value(std::string_view value);

}  // namespace ddprun::launcher
