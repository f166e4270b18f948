// Where a hang becomes a worker failure. HangResponse, told by the watchdog that ranks made no
// progress (or that a torchelastic timer expired), blames the ranks the others wait for when the
// progress records show some (culprit.hpp), else the hung ranks, collects every worker's stacks,
// the blamed first, and then hands the agent one failure per blamed rank, with where it was stuck; the agent
// reports it like any other failure, and the supervisor and the rendezvous turn it into a restart
// or exit 124. The decisions on the way are pure functions, tested as tables: which failures
// (hung_failure), what the user is told (hang_announcement), whose stacks (stack_targets), and
// what the summary shows under a hung rank's "where:" (where_stuck).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/rendezvous.hpp"
#include "hangs/culprit.hpp"
#include "hangs/file_timer_server.hpp"
#include "hangs/hang_policy.hpp"
#include "hangs/stack_dump.hpp"
#include "output/event_log.hpp"
#include "process/worker_group.hpp"

namespace asio {
class io_context;
}

namespace ddprun::launcher {

// Innermost frames of a hung rank's main thread shown in the failure summary.
inline constexpr int kSummaryFrames = 6;

// The failure of a hung rank, from `base` (the worker's identity): exit code 124, the message
// `why` when the hang has a cause of its own (an expired torchelastic timer), else how long the
// rank was silent against which timeout, and the time of its last beat (`now` - silent, on the
// wall clock) so that, on every node, the rank that went silent first is the root cause.
elastic::WorkerFailure hung_failure(elastic::WorkerFailure base, const HungRank& hung, const std::string& why,
                                    double now);

// The message of a rank that others wait for: `why` (culprit.hpp's sentence), then its own
// silence and last step: "rank 0 waits in all_reduce #12; rank 1 has not entered it: last in
// all_reduce #11; no progress for 10.2 s (hang timeout 10.0 s; last step 40)".
std::string culprit_message(const std::string& why, const HungRank& culprit);

// A torchelastic timer that expired at `expired_at` (wall clock), as a hung rank at `now`.
HungRank timer_hang(int local_rank, double expired_at, double now);

// The worker of `workers` that holds an expired timer: the running worker whose pid, or whose
// process group, is the timer's `pid`; nullptr when none (a process outside the job).
WorkerProcess* timer_owner(const std::vector<std::unique_ptr<WorkerProcess>>& workers, pid_t pid);

// The stacks to collect when `failures` hung: theirs first, then every other running worker's
// that has a stacks file.
std::vector<StackDumper::Target> stack_targets(const std::vector<elastic::WorkerFailure>& failures,
                                               const std::vector<std::unique_ptr<WorkerProcess>>& workers);

// The console line: "ddprun: rank(s) R[, R] hung: MESSAGE; collecting the stacks of N worker(s)\n".
std::string hang_announcement(const std::vector<elastic::WorkerFailure>& failures, std::size_t targets);

// The console line for a rank (global `rank`) silent after progress with --hang_timeout off:
// "ddprun: rank R made no progress for S s (last step N); ...\n".
std::string quiet_warning(int rank, const QuietRank& quiet);
// What the summary shows under a hung rank's "where:": the innermost frames of its main thread
// (`pid`) in `stacks`, or why there are none (`missing_tools`, the stack tools not installed);
// then where every worker's stacks are kept: under `logs_root` (attempt `attempt`), or a hint to
// run with --log_dir when `logs_root` is empty.
std::string where_stuck(const std::string& stacks, pid_t pid, const std::string& missing_tools,
                        const std::string& logs_root, int attempt);

// One node's response to hangs, once a round.
class HangResponse {
 public:
  struct Handlers {
    std::function<void(const std::string&)> say;                         // a console line
    std::function<void(EventRecord)> record;                             // an --event_log line
    std::function<elastic::WorkerFailure(const WorkerProcess&)> identity;  // a worker's failure, before the hang's part
    std::function<std::optional<int>()> running_round;  // the round whose workers run, if they do
    std::function<bool(int round)> still_current;       // whether stacks of `round` still matter
    std::function<void(const elastic::WorkerFailure&)> failed;  // a hung rank, its stacks collected
    // Optional: where the hang policy sees `local_rank` (silence, last step). With it, and the
    // progress records that ranks_hung() is given, the ranks others wait for are reported rather
    // than the waiting ones (culprit.hpp).
    std::function<HungRank(int local_rank)> standing;
  };

  // `stack_timeout`: how long the stack tools may take for all workers together. `logs_root`:
  // where the stacks are kept after ddprun exits ("" when they are not).
  HangResponse(asio::io_context& io, const WorkerGroup& group, StackTools tools, std::vector<std::string> environ,
               double stack_timeout, std::string logs_root, Handlers handlers);
  ~HangResponse();

  // A new round, this node's attempt `attempt`: a hang may be found again.
  void start_round(int attempt);
  // Whether this round's hang was found.
  bool reported() const { return reported_; }
  // Hung ranks found whose failures wait for their stacks: until they are handed over, the
  // round is not over on this node, even once every worker has ended (another node's failure
  // may have stopped them meanwhile): the culprit found here must reach the rendezvous with
  // the others' failures, which it may precede in time.
  bool collecting() const { return !pending_.empty(); }

  // `hung` ranks made no progress (`why`: the cause, when the hang has one of its own). Once a
  // round, while the workers run: collects the stacks, then calls `failed` for each hung rank,
  // or, when the progress `records` (every rank's, by local rank, read once at the hang) show
  // that ranks wait in a collective that others of this node have not entered, for each of
  // those others instead (culprit.hpp), whatever their silence.
  void ranks_hung(const std::vector<HungRank>& hung, const std::string& why,
                  const std::vector<ProgressRecord>& records);

  // torchelastic's timer of `expired.pid` expired: a hang of the worker that holds it, or of the
  // one whose process group it is in. Another process gets the signal it asked for, as torchrun
  // sends it; a timer without a signal only reports.
  void timer_expired(const ExpiredTimer& expired);

  // A child ended that is not a worker: true when it was a stack tool.
  bool child_exited(pid_t pid);

 private:
  // The ranks reported for a hang, and what they are told.
  struct Blame {
    std::vector<HungRank> ranks;        // the culprits, else the hung ranks
    std::string why;                    // their failures' message ("" : their silence says it)
    std::optional<double> waited_since; // wall clock: when the first rank began to wait for the culprits
    std::string note;                   // a line for the user when no rank here is the culprit
    bool victims = false;               // every rank here waits for a rank elsewhere: dated when found
  };
  Blame blame(const std::vector<HungRank>& hung, const std::string& why,
              const std::vector<ProgressRecord>& records) const;
  // What `records` (by local rank) say of the collectives of this node's running workers.
  std::vector<RankCollectives> collectives(const std::vector<ProgressRecord>& records) const;
  void stacks_collected(int round, const std::vector<StackDumper::Target>& targets);
  // Says what the stacks of `targets` will lack (a tool not installed), each once a run: before
  // the dump, native tools, and py-spy for Python workers without ddprun's bootstrap.
  void say_missing_tools(const std::vector<StackDumper::Target>& targets);
  // After the dump: py-spy, where a Python worker with the bootstrap has no Python stack either
  // (its faulthandler was not registered: python -I, -E or -S).
  void say_missing_python_stacks(const std::vector<StackDumper::Target>& targets);
  void say_once(const std::string& missing);

  const WorkerGroup& group_;
  std::unique_ptr<StackDumper> stacks_;
  std::string logs_root_;
  Handlers handlers_;
  int attempt_ = 0;
  bool reported_ = false;
  std::vector<elastic::WorkerFailure> pending_;  // the hung ranks, until their stacks are collected
  std::set<std::string> said_missing_;           // the missing tools said so far, in any round
};

}  // namespace ddprun::launcher
