// For the launcher's unit tests of asio-driven components: run the loop until a condition holds.
#pragma once

#include <asio/io_context.hpp>
#include <chrono>

namespace ddprun::launcher::testing {

// Runs `io` until `done()` or 10 s pass (then the test's checks fail; it never hangs).
template <typename Done>
void run_until(asio::io_context& io, Done done) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < limit) io.run_for(std::chrono::milliseconds(20));
  io.restart();
}

}  // namespace ddprun::launcher::testing
