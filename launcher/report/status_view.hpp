// The job's live view, as --status_port publishes it: the agent builds a JobView on the event
// loop (after each event, and updates it at each beat); GET /status, GET /healthz and GET
// /metrics (metrics.hpp) answer from it (pure, tested as tables). The server
// (status_server.hpp) only holds and serves it. The view is of one node: its own ranks.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "report/goodput_ledger.hpp"
#include "report/step_rates.hpp"

namespace ddprun::launcher {

struct RankView {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  std::optional<double> last_beat;   // monotonic seconds (ddprun::monotonic_seconds())
  std::optional<double> deadline;    // monotonic seconds after which it counts as hung
  std::optional<long long> step;     // its last step, when its beats or a --progress_pattern gave one
  StepHistory steps;                 // its steps over the last minute, from the beats
};

// The last worker failure this node saw (or the job's root cause, once it ended), with its kind.
struct FailureView {
  int rank = -1;
  std::string host;
  int exit_code = 0;
  std::string kind;       // ddprun/failure_kind.hpp's name
  bool retryable = true;
  std::string cause;
};

struct JobView {
  std::string phase = "waiting";     // waiting (for a round), spare, running, stopping, exiting
  int attempt = -1;
  int round = -1;
  int restart_count = 0;
  int max_restarts = 0;
  int world_size = 0;
  double hang_timeout = 0;           // 0: none in force
  std::string hung;                  // why the job counts as hung, "" when it does not
  std::string host;                  // this node's host name
  std::string run_id;
  int nodes = 0;                     // in the job this round (GROUP_WORLD_SIZE); 0 before the first round
  int node_rank = -1;                // this node's (GROUP_RANK); -1 before the first round
  int spare = 0;                     // waits as hot spare number N (1: admitted next); 0: not a spare
  // This node's workers are done and it waits for the round's other nodes (group ranks;
  // report/node_wait.hpp); empty otherwise.
  std::vector<int> waiting_for_nodes;
  int rounds_started = 0;            // rounds in which this node started its workers
  int hangs_found = 0;               // rounds in which this node found a hang
  std::map<std::string, int> failures;  // this node's worker failures by kind (ddprun/failure_kind.hpp)
  std::optional<FailureView> last_failure;
  std::string restart_reason;        // why the last restart happened, "" before any
  // The job's hot spares ("hostname (addr)", the next admitted first), known only on the node
  // that runs the coordinator (the TCP host, the etcd leader); nullopt elsewhere.
  std::optional<std::vector<std::string>> spares;
  std::vector<std::pair<std::string, std::string>> quarantined;  // node, why: those left out of the job so far
  std::vector<RankView> ranks;
  std::optional<GoodputLedger> goodput;  // this node's ledger, its figures taken at the request's time
};

// Why the job counts as hung in `phase` (its name in the view: waiting, running, stopping,
// exiting), "" when it does not: from the hang found in this round (`hang_reported`) until the
// agent waits for the next round.
std::string hung_text(std::string_view phase, bool hang_reported);

// `local_rank` beat at `at`, its last step now `step`; it will count as hung at `deadline`, under
// `hang_timeout`.
void record_beat(JobView& view, int local_rank, double at, std::optional<long long> step,
                 std::optional<double> deadline, double hang_timeout);

// A view the agent built afresh takes the step histories of `old`'s ranks that are the same
// workers (local rank and pid): the agent knows only the last step, the view the last minute.
void keep_step_histories(JobView& fresh, const JobView& old);

// Whether `rank` counts as hung at `now`: it runs and its deadline has passed.
bool rank_hung(const RankView& rank, double now);

// The responses, from a view at `now` (monotonic seconds): status code and body.
std::pair<int, std::string> healthz_response(const JobView& view, double now);
std::string status_json(const JobView& view, double now);

// The whole HTTP/1.1 response (status line, headers, body) to a request whose head (request
// line and headers, up to the empty line) is `head`: GET or HEAD of /healthz, /status or
// /metrics (a query string is ignored) answer from the view; another path 404, another method 405, a first line
// that is not "METHOD TARGET HTTP/1.x" 400. Every response closes the connection.
std::string http_response(std::string_view head, const JobView& view, double now);

}  // namespace ddprun::launcher
