// The one type of a user's mistake: a bad flag, value, environment variable or file, or a
// program that cannot be started. Every such error in config/, elastic/ and the launcher
// derives from it; ddprun's main() catches it once, prints "ddprun: error: <what()>" on one
// line and exits with exit_code(). Nothing has started when it is thrown.
#pragma once

#include <stdexcept>
#include <string>

#include "ddprun/exit_codes.hpp"

namespace ddprun {

class UserError : public std::runtime_error {
 public:
  // `what` is one line that names the flag or value and says what is accepted.
  explicit UserError(const std::string& what, int exit_code = exit_code::kUsage)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

namespace config {

// A bad value of an option, a --config file or --rdzv_conf (exit 64): what() names the option
// and what is accepted. parse.hpp's parsers throw it for every option source.
class UsageError : public UserError {
 public:
  using UserError::UserError;
};

}  // namespace config
}  // namespace ddprun
