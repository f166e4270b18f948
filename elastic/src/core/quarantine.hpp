// Suspect nodes: a node whose workers are the root cause of `after` failures of a hardware-like
// kind (ddprun/failure_kind.hpp) within `window` seconds is quarantined, that is left out of the
// job, when the job can go on without it. A pure decision with no clock: a failure's time is its own timestamp (seconds
// since the epoch, the same for every coordinator the job has), so the window means the same to
// a new etcd leader as to the one that saw the failures.
#pragma once

#include <string>
#include <vector>

#include "ddprun/failure_kind.hpp"

namespace ddprun::elastic {

// --rdzv_conf quarantine_after and quarantine_window.
struct QuarantineSettings {
  int after = 2;        // hardware-like root causes of one node that quarantine it; 0: never
  double window = 600;  // seconds from the first of them to the last
  bool operator==(const QuarantineSettings& o) const { return after == o.after && window == o.window; }
};

// One root cause counted against a node.
struct SuspectFailure {
  double at = 0;     // the failure's timestamp, seconds since the epoch
  FailureKindName kind;  // a hardware-like one (ddprun/failure_kind.hpp)
  bool operator==(const SuspectFailure& o) const { return at == o.at && kind == o.kind; }
};

struct QuarantineCase {
  QuarantineSettings settings;
  std::vector<SuspectFailure> failures;  // the node's, oldest first, the latest (this round's) last
  int nodes_without = 0;                 // the job's nodes without this one: the others of the round and the spares
  int min_nodes = 1;                     // --nnodes MIN
  bool runs_rendezvous = false;          // the TCP host: the job's rendezvous would end with it
};

struct QuarantineDecision {
  bool quarantine = false;
  bool suspect = false;  // `after` failures within the window: quarantined, or kept because the job needs it
  std::string why;       // a clause naming the failures and, for a suspect kept, why it is kept; empty if not suspect
};

QuarantineDecision decide_quarantine(const QuarantineCase& c);

// The failures of `failures` (oldest first) that the window still counts once `latest` is
// added: those at most settings.window before it, and at most settings.after of them.
std::vector<SuspectFailure> counted_failures(const QuarantineSettings& settings, std::vector<SuspectFailure> failures,
                                             SuspectFailure latest);

}  // namespace ddprun::elastic
