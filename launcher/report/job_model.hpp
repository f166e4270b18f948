// What `ddprun report` draws, read from a job's --event_log: its rounds, failures, waits and
// other events on each node, each rank's progress, and each node's last goodput figures. Pure:
// lines in, a model out; job_page.hpp draws it.
//
// The log may be of a job still running or killed (no `exit` record; a last line cut short,
// which is left out and said), may hold several jobs (the log is appended: a node's second
// `started` begins a new job, and the model is the last job's), and may be long: each rank's
// progress is kept whole here and thinned only where it is drawn (downsample_progress()).
#pragma once

#include <cstddef>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::launcher {

struct JobModel {
  // Seconds since the epoch of the job's first and last record; every other time of the model is
  // seconds since `start`.
  double start = 0;
  double end = 0;
  std::string program;               // the `started` record's
  std::vector<std::string> nodes;    // in the order of their first record
  std::map<std::string, int> exits;  // each node's exit code, from its `exit` record
  std::size_t records = 0;           // of this job
  std::size_t unreadable = 0;        // lines that were no record (left out)
  bool last_line_cut = false;        // the file ends in a line cut short (a job running or killed)
  int earlier_jobs = 0;              // jobs the file holds before this one

  struct Round {
    std::string node;
    int round = 0;
    int restart_count = 0;
    int world_size = 0;
    double start = 0;
    std::optional<double> workers_started;  // the round's first worker_started
    std::optional<double> end;              // round_ended; none: still running at the log's end
  };
  struct Failure {
    std::string node;
    double time = 0;
    int round = 0;
    int rank = -1;
    std::string kind;
    std::optional<int> exit_code;
    std::string cause;
  };
  // A stretch of a node's time without workers: `starting` (from its start), `recovering` (after
  // a failure), `waiting` (after a stop that was no failure), until its workers' next start or
  // the log's end.
  struct Wait {
    std::string node;
    std::string what;
    double start = 0;
    double end = 0;
  };
  // Any other event worth a line: restart, stop_requested, hang, signal_received, spare,
  // quarantined, health_check, dying_gasp, snapshot_restore, goodput (started, recovered), exit.
  struct Mark {
    std::string node;
    double time = 0;
    std::string event;
    std::string text;
  };
  struct Sample {
    double time = 0;
    double value = 0;
    int run = 0;  // the rank's worker it is of: 0 for its first start, 1 for the next, ...
  };
  // One rank's progress records: the step where its worker tells one, else the beats ddprun saw
  // in the round (`steps` false). A restart starts it again from 0 (a new `run`).
  struct RankProgress {
    int rank = 0;
    std::string node;
    bool steps = true;
    std::vector<Sample> samples;
  };

  std::vector<Round> rounds;
  std::vector<Failure> failures;
  std::vector<Wait> waits;
  std::vector<Mark> marks;
  std::map<int, RankProgress> ranks;
  std::map<std::string, nlohmann::json> goodput;  // each node's last goodput record's fields

  bool finished() const { return !nodes.empty() && exits.size() == nodes.size(); }
  int round_count() const;  // distinct round numbers
};

// Reads an event log. `where` names it in errors. Throws ddprun::UserError (exit 64) naming
// `where` when it holds no record of ddprun's event log: empty, or another kind of file.
JobModel read_job(std::istream& in, const std::string& where);

// At most about `max_points` of `samples` (sorted by time), for a drawing: the time is cut in
// max_points / 2 equal stretches and each keeps its lowest and its highest value (in time
// order), so that a restart's fall from the step reached back to 0 is kept.
std::vector<JobModel::Sample> downsample_progress(const std::vector<JobModel::Sample>& samples, std::size_t max_points);

}  // namespace ddprun::launcher
