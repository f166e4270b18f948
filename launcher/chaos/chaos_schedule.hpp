// --chaos's faults as a schedule: Poisson times of mean `mtbf` seconds since ddprun's start, each
// with its kind and the worker it hits, drawn from the spec's seed. Pure and portable (its own
// generator, splitmix64, and its own exponential draw: the standard library's distributions
// differ between implementations), so that a seed replays the same faults anywhere; tested as a
// table (tests/launcher/chaos_schedule_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/chaos_spec.hpp"

namespace ddprun::launcher {

enum class ChaosKind { kKill, kHang, kNode };
const char* chaos_kind_name(ChaosKind kind);  // "kill", "hang", "node": the spec's words

struct ChaosFault {
  double due = 0;       // seconds since ddprun's start
  ChaosKind kind = ChaosKind::kKill;
  int local_rank = 0;   // the worker it hits (kill, hang), of `nproc`
};

class ChaosSchedule {
 public:
  // `stream`: which of the seed's streams this node draws from: its group rank in its first round,
  // so that the nodes of a job, which share a seed, do not fault at the same times. `nproc`: the
  // node's workers, among which a fault's worker is picked.
  ChaosSchedule(const config::ChaosSpec& spec, int stream, int nproc);

  // The next fault, after the last one returned.
  ChaosFault next();

 private:
  std::uint64_t draw();  // splitmix64
  double uniform();      // [0, 1)

  config::ChaosSpec spec_;
  std::vector<ChaosKind> kinds_;
  int nproc_;
  std::uint64_t state_;
  double at_ = 0;
};

// The loud line at the start (no newline): what is injected, how often, and how to replay it.
std::string chaos_start_line(const config::ChaosSpec& spec, bool multi_node);

}  // namespace ddprun::launcher
