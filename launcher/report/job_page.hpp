// The page of `ddprun report`: one self-contained HTML file (inline CSS and SVG, no script, no
// network) that draws a job's model (job_model.hpp): the outcome, each node's goodput, the
// timeline of its rounds, waits and failures, each rank's progress, and the failures and other
// events as tables. Every string from the log is escaped. Pure.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "report/job_model.hpp"

namespace ddprun::launcher {

// The most of each drawn and listed thing, so that a long job's page stays a few megabytes.
struct PageLimits {
  std::size_t points_per_rank = 600;  // progress points drawn a rank (downsample_progress())
  std::size_t ranks = 64;             // ranks drawn (the lowest), the others said
  std::size_t rows = 500;             // rows of each table (the first), the others said
  std::size_t labels = 40;            // failures labelled on the timeline (each has its tooltip)
};

// `text` for HTML text and attribute values: & < > " ' as character references.
std::string html_escape(std::string_view text);

// The page. `title`: what the page is of (the event log's name).
std::string job_page(const JobModel& job, const std::string& title, const PageLimits& limits = {});

}  // namespace ddprun::launcher
