// --chaos: a rehearsal of failures (issue 58, item 2). ddprun injects faults into its own job at
// Poisson times of mean `mtbf` seconds, drawn from `seed` (launcher/chaos/ draws and injects
// them). The grammar: comma-separated KEY=VALUE, where kinds' words follow it, comma-separated
// too: "mtbf=60,kinds=kill,hang,node,seed=7". "off" (the default) or empty: no rehearsal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::config {

struct ChaosSpec {
  double mtbf = 0;      // mean seconds between faults; 0: off
  bool kill = false;    // SIGKILL a random worker
  bool hang = false;    // SIGSTOP a random worker (a hang, for --hang_timeout to find)
  bool node = false;    // SIGKILL this node's ddprun and its workers (a node lost)
  std::uint64_t seed = 0;
  bool seed_given = false;  // false: resolve_config chose it (said in the loud line)
  bool on() const { return mtbf > 0; }
};

// The spec of --chaos's `text`; throws UsageError naming the key and what it accepts. A spec
// without kinds injects `kill`; without a seed, seed_given is false (the caller chooses one).
ChaosSpec parse_chaos(std::string_view text);

// The spec as one text that parse_chaos reads back as the same spec (the seed included): what
// --print_config writes, the loud line shows for a replay and every node of a job must share.
// "off" when off.
std::string chaos_text(const ChaosSpec& spec);

// The seed a job of several nodes without seed= uses: the same on every node (from the run id).
std::uint64_t chaos_seed_of(std::string_view run_id);

}  // namespace ddprun::config
