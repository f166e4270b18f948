// Suspect nodes: decide_quarantine() and counted_failures() as tables.
#include "core/quarantine.hpp"

#include <doctest/doctest.h>

namespace ddprun::elastic {
namespace {

std::vector<SuspectFailure> at(std::initializer_list<double> times) {
  std::vector<SuspectFailure> failures;
  for (double t : times) failures.push_back({t, FailureKind::kSegfault});
  return failures;
}

TEST_CASE("decide_quarantine: K hardware-like root causes within the window, and the job can go on without the node") {
  struct Row {
    int after;
    double window;
    std::vector<SuspectFailure> failures;
    int nodes_without;
    int min_nodes;
    bool runs_rendezvous;
    bool suspect;
    bool quarantine;
    const char* why;
  };
  const char* kTwo = "its workers were the root cause of 2 hardware-like failures within 600 s (segfault, segfault)";
  const std::vector<Row> rows = {
      // 3 nodes + 1 spare (MIN 3): the second within the window quarantines.
      {2, 600, at({100, 200}), 3, 3, false, true, true, kTwo},
      {2, 600, at({200}), 3, 3, false, false, false, ""},                   // one is not enough
      {2, 600, at({100, 701}), 3, 3, false, false, false, ""},              // the first is out of the window
      {2, 600, at({100, 700}), 3, 3, false, true, true, kTwo},              // the window's edge counts
      {3, 600, at({100, 200}), 3, 3, false, false, false, ""},              // quarantine_after=3
      {1, 600, at({100}), 3, 3, false, true, true,
       "its workers were the root cause of 1 hardware-like failures within 600 s (segfault)"},
      {0, 600, at({100, 200, 300}), 3, 3, false, false, false, ""},         // quarantine_after=0: off
      // At MIN without a spare: a normal restart, said so.
      {2, 600, at({100, 200}), 2, 3, false, true, false,
       "its workers were the root cause of 2 hardware-like failures within 600 s (segfault, segfault); kept, since the "
       "job would have 2 nodes without it, fewer than --nnodes MIN 3, and no spare"},
      // Elastic 2:3 at 3 nodes: it shrinks to MIN.
      {2, 600, at({100, 200}), 2, 2, false, true, true, kTwo},
      // The node that runs the rendezvous stays: the job would end with it.
      {2, 600, at({100, 200}), 3, 3, true, true, false, "its workers were the root cause of 2 hardware-like failures "
                                                        "within 600 s (segfault, segfault); kept, since it runs the job's "
                                                        "rendezvous"},
      {2, 600, {}, 3, 3, false, false, false, ""},
  };
  for (const Row& row : rows) {
    QuarantineCase c;
    c.settings = {row.after, row.window};
    c.failures = row.failures;
    c.nodes_without = row.nodes_without;
    c.min_nodes = row.min_nodes;
    c.runs_rendezvous = row.runs_rendezvous;
    const QuarantineDecision d = decide_quarantine(c);
    CAPTURE(row.after);
    CAPTURE(row.nodes_without);
    CAPTURE(row.failures.size());
    CHECK(d.suspect == row.suspect);
    CHECK(d.quarantine == row.quarantine);
    CHECK(d.why == row.why);
  }
}

TEST_CASE("counted_failures keeps the last quarantine_after within the window of the latest") {
  struct Row {
    QuarantineSettings settings;
    std::vector<SuspectFailure> before;
    double latest;
    std::vector<SuspectFailure> counted;
  };
  const std::vector<Row> rows = {
      {{2, 600}, {}, 100, at({100})},
      {{2, 600}, at({100}), 200, at({100, 200})},
      {{2, 600}, at({100}), 800, at({800})},  // 100 is more than 600 s before 800
      {{2, 600}, at({100, 200}), 300, at({200, 300})},
      {{3, 60}, at({100, 150, 170}), 180, at({150, 170, 180})},
  };
  for (const Row& row : rows) {
    CAPTURE(row.latest);
    CHECK(counted_failures(row.settings, row.before, {row.latest, FailureKind::kSegfault}) == row.counted);
  }
}

}  // namespace
}  // namespace ddprun::elastic
