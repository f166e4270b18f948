// store_room(): which connection gives way when the workers' store is at its limit, as a table.
#include "store/store_room.hpp"

#include <doctest/doctest.h>

#include <optional>

namespace ddprun::elastic {
namespace {

using Action = StoreRoom::Action;

TEST_CASE("at its limit the store closes only a connection silent past the grace time, else waits") {
  constexpr double kGrace = 5;
  struct Row {
    const char* what;
    std::size_t open, limit;
    std::optional<double> oldest_silent_age;
    Action action;
    std::optional<double> wait_seconds;
  };
  const Row rows[] = {
      {"below the limit, silent or not: accepted", 63, 64, 0.0, Action::kAccept, {}},
      {"below the limit, every one spoke", 0, 64, {}, Action::kAccept, {}},
      {"at the limit, every one spoke: wait for one to close", 64, 64, {}, Action::kWait, {}},
      {"at the limit, the oldest silent one connected a moment ago: it is not closed, wait for its grace",
       64, 64, 0.25, Action::kWait, 4.75},
      {"a worker silent 4.99 s on a loaded machine is still not closed", 64, 64, 4.99, Action::kWait, 0.01},
      {"silent exactly the grace time: closed", 64, 64, 5.0, Action::kCloseOldestSilent, {}},
      {"silent for a minute (a flood): closed", 64, 64, 60.0, Action::kCloseOldestSilent, {}},
      {"over the limit (the limit fell): the same rule", 70, 64, 6.0, Action::kCloseOldestSilent, {}},
  };
  for (const Row& row : rows) {
    CAPTURE(row.what);
    const StoreRoom room = store_room(row.open, row.limit, row.oldest_silent_age, kGrace);
    CHECK(room.action == row.action);
    CHECK(room.wait_seconds.has_value() == row.wait_seconds.has_value());
    if (room.wait_seconds && row.wait_seconds) CHECK(*room.wait_seconds == doctest::Approx(*row.wait_seconds));
  }
}

}  // namespace
}  // namespace ddprun::elastic
