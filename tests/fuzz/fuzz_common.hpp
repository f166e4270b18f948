// What every fuzz target checks of an error message: one line, its values quoted short.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace ddprun::fuzz {

// Aborts (a finding) when `message` has a newline or is longer than a message whose quoted
// values are cut at 80 characters can be.
inline void check_message(std::string_view message, std::size_t max = 600) {
  if (message.find('\n') != std::string_view::npos || message.size() > max) {
    std::fprintf(stderr, "bad error message (%zu bytes): %.300s\n", message.size(), std::string(message).c_str());
    std::abort();
  }
}

}  // namespace ddprun::fuzz
