// --chaos: the spec's grammar (config/src/launch/chaos_spec.cpp) and the schedule drawn from it
// (launcher/chaos/chaos_schedule.cpp), as tables.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "chaos/chaos_schedule.hpp"
#include "ddprun/chaos_spec.hpp"
#include "ddprun/user_error.hpp"

using namespace ddprun;
using namespace ddprun::launcher;

TEST_CASE("--chaos: the specs read, and each written back as it reads") {
  struct Row {
    const char* given;
    const char* written;  // chaos_text() of what it reads
    bool seed_given;
  };
  const Row rows[] = {
      {"off", "off", false},
      {"", "off", false},
      {"mtbf=60", "mtbf=60,kinds=kill,seed=0", false},
      {"mtbf=60,kinds=kill,hang,node,seed=7", "mtbf=60,kinds=kill,hang,node,seed=7", true},
      {"seed=7,kinds=hang,mtbf=0.5", "mtbf=0.5,kinds=hang,seed=7", true},
      {"kinds=node,kill,mtbf=2", "mtbf=2,kinds=kill,node,seed=0", false},
      {"mtbf=1e1,kinds=kill,kill", "mtbf=10,kinds=kill,seed=0", false},
  };
  for (const Row& row : rows) {
    CAPTURE(row.given);
    const config::ChaosSpec spec = config::parse_chaos(row.given);
    CHECK(config::chaos_text(spec) == row.written);
    CHECK(spec.seed_given == row.seed_given);
    // What is written reads back as the same spec.
    CHECK(config::chaos_text(config::parse_chaos(config::chaos_text(spec))) == row.written);
  }
}

TEST_CASE("--chaos: each bad spec refused in one line naming the key and what is accepted") {
  struct Row {
    const char* given;
    const char* why;
  };
  const Row rows[] = {
      {"on", "'on' is not KEY=VALUE"},
      {"kinds=kill", "mtbf is missing"},
      {"mtbf=0", "mtbf=0 is not seconds more than 0"},
      {"mtbf=-1", "mtbf=-1 is not seconds more than 0"},
      {"mtbf=soon", "mtbf=soon is not seconds more than 0"},
      {"mtbf=inf", "mtbf=inf is not seconds more than 0"},
      {"mtbf=5,mtbf=6", "mtbf is given twice"},
      {"mtbf=5,kinds=kill,oom", "kinds: 'oom' is not kill, hang or node"},
      {"mtbf=5,kinds=", "kinds: '' is not kill, hang or node"},
      {"mtbf=5,seed=-3", "seed=-3 is not a whole number, 0 or more"},
      {"mtbf=5,seed=x", "seed=x is not a whole number, 0 or more"},
      {"mtbf=5,seed=1,seed=2", "seed is given twice"},
      {"mtbf=5,rate=3", "unknown key 'rate'"},
      {"mtbf=5,,kinds=kill", "'' is not KEY=VALUE"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.given);
    std::string message;
    try {
      config::parse_chaos(row.given);
    } catch (const config::UsageError& e) {
      message = e.what();
    }
    CHECK(message == std::string("--chaos=") + row.given + ": " + row.why +
                         "; accepted: off, or mtbf=SECONDS (more than 0), kinds=kill,hang,node (one or more), seed=N");
  }
}

namespace {
config::ChaosSpec spec_of(const char* text) { return config::parse_chaos(text); }
std::vector<ChaosFault> draws(const config::ChaosSpec& spec, int stream, int nproc, int n) {
  ChaosSchedule s(spec, stream, nproc);
  std::vector<ChaosFault> out;
  for (int i = 0; i < n; ++i) out.push_back(s.next());
  return out;
}
}  // namespace

TEST_CASE("the schedule: a seed replays the same faults; another seed or stream draws others") {
  const auto a = draws(spec_of("mtbf=10,kinds=kill,hang,seed=7"), 0, 4, 50);
  const auto b = draws(spec_of("mtbf=10,kinds=kill,hang,seed=7"), 0, 4, 50);
  const auto other_seed = draws(spec_of("mtbf=10,kinds=kill,hang,seed=8"), 0, 4, 50);
  const auto other_node = draws(spec_of("mtbf=10,kinds=kill,hang,seed=7"), 1, 4, 50);
  for (int i = 0; i < 50; ++i) {
    CHECK(a[i].due == b[i].due);
    CHECK(a[i].kind == b[i].kind);
    CHECK(a[i].local_rank == b[i].local_rank);
  }
  CHECK(a[0].due != other_seed[0].due);
  CHECK(a[0].due != other_node[0].due);
}

TEST_CASE("the schedule: the first faults of seed 7, written down (a change of the generator is a change of every "
          "replay)") {
  const auto f = draws(spec_of("mtbf=10,kinds=kill,hang,seed=7"), 0, 2, 3);
  // Recorded from this implementation (splitmix64, -mtbf*log1p(-u)): any platform gives the same.
  const double expected[] = {4.940172597583024, 13.68519167909605, 19.99542623524733};
  for (int i = 0; i < 3; ++i) CHECK(f[i].due == doctest::Approx(expected[i]).epsilon(1e-12));
}

TEST_CASE("the schedule: Poisson times of mean mtbf, every kind asked for and only those, every worker") {
  struct Row {
    const char* spec;
    int nproc;
    bool kill, hang, node;
  };
  const Row rows[] = {
      {"mtbf=10,seed=1", 2, true, false, false},
      {"mtbf=3,kinds=hang,seed=2", 8, false, true, false},
      {"mtbf=0.5,kinds=kill,hang,node,seed=3", 4, true, true, true},
  };
  for (const Row& row : rows) {
    CAPTURE(row.spec);
    const config::ChaosSpec spec = spec_of(row.spec);
    const int n = 20000;
    const auto f = draws(spec, 0, row.nproc, n);
    double last = 0, sum_gaps = 0;
    int kinds[3] = {0, 0, 0};
    std::vector<int> ranks(static_cast<size_t>(row.nproc), 0);
    for (const auto& x : f) {
      CHECK(x.due > last);
      sum_gaps += x.due - last;
      last = x.due;
      ++kinds[static_cast<int>(x.kind)];
      REQUIRE(x.local_rank >= 0);
      REQUIRE(x.local_rank < row.nproc);
      ++ranks[static_cast<size_t>(x.local_rank)];
    }
    // The mean gap within 3% of mtbf (20,000 exponential draws: its standard error is 0.7%).
    CHECK(sum_gaps / n == doctest::Approx(spec.mtbf).epsilon(0.03));
    CHECK((kinds[0] > 0) == row.kill);
    CHECK((kinds[1] > 0) == row.hang);
    CHECK((kinds[2] > 0) == row.node);
    for (int r : ranks) CHECK(r > 0);
  }
}

TEST_CASE("the loud line says what is injected and how to replay it") {
  const std::string line = chaos_start_line(spec_of("mtbf=30,kinds=kill,hang,seed=5"), false);
  CHECK(line ==
        "ddprun: --chaos: REHEARSAL OF FAILURES: ddprun injects faults into this job, every 30 s on average (SIGKILL a "
        "worker, SIGSTOP a worker (a hang)), seed 5; each is recorded as injected; replay with "
        "--chaos=mtbf=30,kinds=kill,hang,seed=5");
}
