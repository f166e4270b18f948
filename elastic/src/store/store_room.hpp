// When the workers' store is at its connection limit, which connection gives way: a pure rule,
// so that it is tested as a table (tests/elastic/store_room_test.cpp) and AgentStoreServer only
// applies it.
//
// A real worker speaks at once, but "at once" on a loaded machine can be seconds after its
// connect(), and torch 1.13's clients stay silent until their first call (its second,
// "callback" connection until a watch). So a silent connection is closed only once it has been
// silent for `grace` seconds; until then the newcomer waits in the kernel's listen backlog
// (its connect() has already succeeded; what it sends waits there too), not refused: a worker
// that connected just before or among a flood of idle connections is never the one closed, and
// a worker behind the flood is served once the flood's connections have aged.
#pragma once

#include <cstddef>
#include <optional>

namespace ddprun::elastic {

struct StoreRoom {
  enum class Action {
    kAccept,             // below the limit: accept the next connection
    kCloseOldestSilent,  // close the connection silent longest, then accept the next one
    kWait,               // accept nothing for now: see wait_seconds
  };
  Action action = Action::kAccept;
  // kWait: when to ask again (the oldest silent connection's grace runs out); none: only
  // when a connection closes (every one of them has spoken).
  std::optional<double> wait_seconds;
};

// `open`: connections kept now, `limit` how many may be; `oldest_silent_age`: seconds since the
// oldest connection that has sent nothing was accepted (none: every connection has spoken).
StoreRoom store_room(std::size_t open, std::size_t limit, std::optional<double> oldest_silent_age, double grace);

}  // namespace ddprun::elastic
