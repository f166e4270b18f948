// The rendezvous host's heartbeat rule (tcp/channel.hpp): how long it may stay silent before it
// answers a node's heartbeat, so that the node hears from it at least every heartbeat_timeout/3.
#include "tcp/channel.hpp"

#include <doctest/doctest.h>

#include <algorithm>

namespace ddprun::elastic {
namespace {

TEST_CASE("the host answers a heartbeat once silent for heartbeat_timeout/3 less the node's interval") {
  struct Row {
    double interval, timeout, answer_after;
  };
  for (const Row& row : {Row{0.5, 5, 5.0 / 3 - 0.5},   // the defaults: an answer every third heartbeat
                         Row{2, 20, 20.0 / 3 - 2},     // --heartbeat 2:20
                         Row{0.25, 2, 2.0 / 3 - 0.25},  // the scenarios' heartbeat_timeout=2
                         Row{5.0 / 3, 5, 0},           // interval = timeout/3: every heartbeat answered
                         Row{4, 5, 0}}) {              // an interval near the timeout: every one, as before
    RendezvousTimeouts timeouts;
    timeouts.heartbeat_interval = row.interval;
    timeouts.heartbeat_timeout = row.timeout;
    CAPTURE(row.interval);
    CAPTURE(row.timeout);
    CHECK(heartbeat_answer_after(timeouts) == doctest::Approx(row.answer_after));
    // The node's next heartbeat after that comes within one interval: the host is heard from
    // within timeout/3, or within one interval when that is longer, and so within the timeout.
    CHECK(heartbeat_answer_after(timeouts) + row.interval <= std::max(row.timeout / 3, row.interval) + 1e-9);
  }
}

}  // namespace
}  // namespace ddprun::elastic
