// Which rank a hang is about. When ranks hang because one of them never came to a collective,
// the ranks found silent first are often its victims: they beat when they entered the
// collective, and wait in it. Each Python worker's progress record (ddprun/progress_record.hpp:
// the number of collectives it entered, `coll`, and whether it is inside the last one, `in`)
// tells them apart: the culprits are the ranks that have not entered the collective the others
// wait in. A pure decision, tested as a table (tests/launcher/culprit_test.cpp).
//
// Only this node's ranks are seen: ranks on other nodes keep their records on their own node.
// When every rank here waits in the same collective, the one they wait for is elsewhere (or the
// collective itself is stuck), and no rank here is named.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddprun/progress_record.hpp"

namespace ddprun::launcher {

// What a rank's progress record says about its collectives.
struct RankCollectives {
  int rank = 0;                    // global rank
  std::optional<long long> coll;   // the number of collectives it entered; none: no record of them
  bool in = false;                 // inside collective number `coll` now
  std::string op;                  // its name (all_reduce), "" if unknown
};

// What `record`, global `rank`'s progress record, says about its collectives.
RankCollectives rank_collectives(int rank, const ProgressRecord& record);

struct Culprits {
  std::vector<int> ranks;  // the ranks the others wait for, by rank; empty: none on this node
  // What the ranks are doing, for the user: "rank 0 waits in all_reduce #12; rank 1 has not
  // entered it: last in all_reduce #11".
  std::string why;
  long long waited = 0;            // the collective waited in
  std::vector<int> waiting;        // the ranks that wait in it
};

// The ranks that have not entered the latest collective that some rank waits in (a rank with no
// record of collectives has entered none); nullopt when no rank waits in a collective.
std::optional<Culprits> find_culprits(const std::vector<RankCollectives>& ranks);

}  // namespace ddprun::launcher
