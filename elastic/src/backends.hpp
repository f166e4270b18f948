// The table of rendezvous backends: one row each (core/backend_entry.hpp), exported by the
// backend's folder. This file's .cpp and CMake are the only ones that know every backend.
#pragma once

#include <vector>

#include "core/backend_entry.hpp"

namespace ddprun::elastic {

// Every row, in the order the message for an unknown --rdzv_conf key lists their keys.
const std::vector<BackendEntry>& backends();

// The row of `id`; every --rdzv_backend name config/ accepts has one.
const BackendEntry& backend_entry(Backend id);

}  // namespace ddprun::elastic
