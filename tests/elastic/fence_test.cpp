// Fencing's rule (core/fence.hpp): when a node kills its workers, from when it sent the last
// message the coordinator acknowledged; and the ledger of a node's heartbeats that acknowledgements
// are read against.
#include "core/fence.hpp"

#include <doctest/doctest.h>

#include <vector>

namespace ddprun::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST_CASE("a node fences a fifth of the lifetime, at least 0.2 s, before the coordinator can count it lost") {
  struct Row {
    double lifetime, margin, fence_after;
  };
  for (const Row& row : {Row{5, 1, 4},          // heartbeat_timeout's default
                         Row{3, 0.6, 2.4},      // partition_test's
                         Row{20, 4, 16},        // --heartbeat 2:20
                         Row{0.5, 0.2, 0.3},    // at least 0.2 s
                         Row{1, 0.2, 0.8}}) {   // where the two rules meet
    CAPTURE(row.lifetime);
    CHECK(fence_margin(row.lifetime) == doctest::Approx(row.margin));
    const Clock::time_point sent{milliseconds(7000)};
    CHECK(std::chrono::duration<double>(fence_deadline(sent, row.lifetime) - sent).count() ==
          doctest::Approx(row.fence_after));
  }
}

TEST_CASE("an acknowledgement gives the send time of the heartbeat it names, once, and only moving forward") {
  HeartbeatLedger ledger;
  const auto at = [](int ms) { return Clock::time_point{milliseconds(ms)}; };
  CHECK(ledger.send(at(0)) == 1);
  CHECK(ledger.send(at(500)) == 2);
  CHECK(ledger.send(at(1000)) == 3);
  CHECK_FALSE(ledger.acknowledged(0));       // the host heard no numbered heartbeat yet
  CHECK(ledger.acknowledged(2) == at(500));  // heartbeat 1 was passed over: its answer was not sent
  CHECK_FALSE(ledger.acknowledged(1));       // older than one acknowledged: moves nothing
  CHECK_FALSE(ledger.acknowledged(2));       // the same again
  CHECK_FALSE(ledger.acknowledged(9));       // never sent: a confused or hostile host moves nothing
  CHECK(ledger.acknowledged(3) == at(1000));
  CHECK(ledger.send(at(1500)) == 4);
  CHECK(ledger.acknowledged(4) == at(1500));
}

TEST_CASE("a node that hears no answer forgets its oldest heartbeats, which can then only bring the fence sooner") {
  HeartbeatLedger ledger;
  const std::size_t sent = HeartbeatLedger::kMaxUnacknowledged + 10;
  for (std::size_t i = 0; i < sent; ++i) ledger.send(Clock::time_point{milliseconds(500 * i)});
  CHECK_FALSE(ledger.acknowledged(5));  // forgotten
  CHECK(ledger.acknowledged(11) == Clock::time_point{milliseconds(500 * 10)});
}

}  // namespace
}  // namespace ddprun::elastic
