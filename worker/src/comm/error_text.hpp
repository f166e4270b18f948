// How the worker library words durations and exceptions in its own error messages.
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include <c10/util/Exception.h>
#include <fmt/format.h>

namespace ddprun::detail {

inline std::string seconds_text(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

// c10::Error's what() carries a C++ backtrace; the short form is what a reader needs.
inline std::string exception_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace ddprun::detail
