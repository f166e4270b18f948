#include "store/store_room.hpp"

namespace ddprun::elastic {

StoreRoom store_room(std::size_t open, std::size_t limit, std::optional<double> oldest_silent_age, double grace) {
  if (open < limit) return {StoreRoom::Action::kAccept, std::nullopt};
  if (!oldest_silent_age) return {StoreRoom::Action::kWait, std::nullopt};
  if (*oldest_silent_age >= grace) return {StoreRoom::Action::kCloseOldestSilent, std::nullopt};
  return {StoreRoom::Action::kWait, grace - *oldest_silent_age};
}

}  // namespace ddprun::elastic
