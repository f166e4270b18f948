#include "chaos/chaos_schedule.hpp"

#include <cstdint>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace ddprun::launcher {

const char* chaos_kind_name(ChaosKind kind) {
  switch (kind) {
    case ChaosKind::kKill: return "kill";
    case ChaosKind::kHang: return "hang";
    case ChaosKind::kNode: return "node";
  }
  return "kill";
}

ChaosSchedule::ChaosSchedule(const config::ChaosSpec& spec, int stream, int nproc)
    : spec_(spec), nproc_(nproc < 1 ? 1 : nproc),
      state_(spec.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(stream < 0 ? 0 : stream))) {
  if (spec.kill) kinds_.push_back(ChaosKind::kKill);
  if (spec.hang) kinds_.push_back(ChaosKind::kHang);
  if (spec.node) kinds_.push_back(ChaosKind::kNode);
  if (kinds_.empty()) kinds_.push_back(ChaosKind::kKill);
}

std::uint64_t ChaosSchedule::draw() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {

// ln(x) for x > 0 without libm, which ddprun does not link (tests/launcher/libraries_test.sh):
// x = m * 2^e with m in [1, 2), and ln(m) = 2 atanh(z) with z = (m - 1) / (m + 1) <= 1/3, whose
// series gains a factor of at least 9 a term: 30 terms are exact to the double.
double natural_log(double x) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1023} << 52);
  double m = 0;
  std::memcpy(&m, &bits, sizeof m);
  const double z = (m - 1) / (m + 1), z2 = z * z;
  double term = z, sum = 0;
  for (int k = 1; k < 60; k += 2) {
    sum += term / k;
    term *= z2;
  }
  return e * 0.69314718055994530942 + 2 * sum;
}

}  // namespace

double ChaosSchedule::uniform() { return static_cast<double>(draw() >> 11) * 0x1.0p-53; }

ChaosFault ChaosSchedule::next() {
  ChaosFault f;
  at_ += -spec_.mtbf * natural_log(1 - uniform());  // exponential, mean mtbf (1 - uniform() > 0)
  f.due = at_;
  f.kind = kinds_[draw() % kinds_.size()];
  f.local_rank = static_cast<int>(draw() % static_cast<std::uint64_t>(nproc_));
  return f;
}

std::string chaos_start_line(const config::ChaosSpec& spec, bool multi_node) {
  std::string kinds;
  const std::pair<bool, const char*> kinds_asked[] = {
      {spec.kill, "SIGKILL a worker"}, {spec.hang, "SIGSTOP a worker (a hang)"}, {spec.node, "kill a node's ddprun"}};
  for (const auto& [on, what] : kinds_asked) {
    if (on) kinds += (kinds.empty() ? "" : ", ") + std::string(what);
  }
  return fmt::format(
      "ddprun: --chaos: REHEARSAL OF FAILURES: ddprun injects faults into this job{}, every {} s on average ({}), "
      "seed {}; each is recorded as injected; replay with --chaos={}",
      multi_node ? " (every node its own)" : "", spec.mtbf, kinds, spec.seed, config::chaos_text(spec));
}

}  // namespace ddprun::launcher
