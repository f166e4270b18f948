// ddprun/system.hpp: the facts about this machine that messages and reports name.
#include <signal.h>

#include <string>

#include <doctest/doctest.h>

#include "ddprun/system.hpp"

TEST_CASE("signal names, and a number for a signal without one") {
  CHECK(ddprun::signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(ddprun::signal_name(SIGKILL) == "SIGKILL");
  CHECK(ddprun::signal_name(99) == "signal 99");
}

TEST_CASE("read_file: the bytes, or nothing for a file that cannot be opened") {
  CHECK(ddprun::read_file("/proc/self/cmdline").has_value());
  CHECK_FALSE(ddprun::read_file("/nonexistent/ddprun").has_value());
}
