// What reaches the agent's loop: one type an event of supervisor.hpp, with what it carries, as
// a std::variant in the order of the Event enum (elastic's Message is built the same way).
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "ddprun/rendezvous.hpp"
#include "process/worker_group.hpp"
#include "report/health_check_end.hpp"
#include "snapshots/dying_gasp.hpp"
#include "supervisor.hpp"

namespace ddprun::launcher {
namespace occurred {

struct RoundStarted {
  elastic::RoundAssignment assignment;
};
struct WorkersStarted {};
struct WorkerSucceeded {};
struct WorkerFailed {
  elastic::WorkerFailure failure;
  // A worker's exit whose kind is found once the other workers have been told to stop (the
  // first failure's rules cost 0.5 ms of the path from a worker's exit to its restart); unset
  // where the kind was found before.
  struct KindEvidence {
    const WorkerProcess* worker;
    bool stopped_by_ddprun;
    bool after_another_failure;
  };
  std::optional<KindEvidence> kind_from;
  bool classified = false;  // kind found and counted
};
struct AllEnded {};
struct StopRequested {
  std::string why;
};
struct PeerFailed {
  std::string why;
};
struct ShutdownSignal {
  int signal = 0;
};
struct GraceExpired {};
// From the gasp's timer (RoundWorkers::gasp()); another source may end the gasp the same way,
// saying how (a watch that sees the folder settle).
struct GaspEnded {
  GaspEnd how = GaspEnd::kGracePassed;
};
struct JobFinished {
  elastic::JobOutcome outcome;
};
struct Fenced {
  std::string why;
};
struct HealthCheckPassed {};
struct HealthCheckFailed {
  HealthCheckReport report;
};

}  // namespace occurred

using Occurrence =
    std::variant<occurred::RoundStarted, occurred::WorkersStarted, occurred::WorkerSucceeded, occurred::WorkerFailed,
                 occurred::AllEnded, occurred::StopRequested, occurred::PeerFailed, occurred::ShutdownSignal,
                 occurred::GraceExpired, occurred::GaspEnded, occurred::JobFinished, occurred::Fenced,
                 occurred::HealthCheckPassed, occurred::HealthCheckFailed>;

// The supervisor's event an occurrence is.
inline Event event_of(const Occurrence& o) { return static_cast<Event>(o.index()); }

template <Event event, typename T>
constexpr bool occurs_as = std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(event), Occurrence>, T>;
static_assert(std::variant_size_v<Occurrence> == static_cast<std::size_t>(Event::kHealthCheckFailed) + 1);
static_assert(occurs_as<Event::kRoundStarted, occurred::RoundStarted> &&
              occurs_as<Event::kWorkersStarted, occurred::WorkersStarted> &&
              occurs_as<Event::kWorkerSucceeded, occurred::WorkerSucceeded> &&
              occurs_as<Event::kWorkerFailed, occurred::WorkerFailed> &&
              occurs_as<Event::kAllEnded, occurred::AllEnded> &&
              occurs_as<Event::kStopRequested, occurred::StopRequested> &&
              occurs_as<Event::kPeerFailed, occurred::PeerFailed> &&
              occurs_as<Event::kShutdownSignal, occurred::ShutdownSignal> &&
              occurs_as<Event::kGraceExpired, occurred::GraceExpired> &&
              occurs_as<Event::kGaspEnded, occurred::GaspEnded> &&
              occurs_as<Event::kJobFinished, occurred::JobFinished> && occurs_as<Event::kFenced, occurred::Fenced> &&
              occurs_as<Event::kHealthCheckPassed, occurred::HealthCheckPassed> &&
              occurs_as<Event::kHealthCheckFailed, occurred::HealthCheckFailed>);

}  // namespace ddprun::launcher
