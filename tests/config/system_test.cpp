// ddprun/system.hpp: the facts about this machine that messages and reports name.
#include <signal.h>
#include <string.h>

#include <string>

#include <doctest/doctest.h>

#include "ddprun/system.hpp"

TEST_CASE("signal names, and a number for a signal without one") {
  CHECK(ddprun::signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(ddprun::signal_name(SIGKILL) == "SIGKILL");
  CHECK(ddprun::signal_name(99) == "signal 99");
  CHECK(ddprun::signal_name(0) == "signal 0");
  CHECK(ddprun::signal_name(SIGRTMIN) == "signal " + std::to_string(SIGRTMIN));
}

// The table replaces glibc's sigabbrev_np() (glibc 2.32; the wheel targets 2.28): it must name
// every signal as that does, here where the build's glibc has it.
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
TEST_CASE("signal_name agrees with glibc's sigabbrev_np for every signal number") {
  for (int signal = 0; signal <= SIGRTMAX + 1; ++signal) {
    CAPTURE(signal);
    const char* abbrev = ::sigabbrev_np(signal);
    CHECK(ddprun::signal_name(signal) == (abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signal)));
  }
}
#endif

TEST_CASE("read_file: the bytes, or nothing for a file that cannot be opened") {
  CHECK(ddprun::read_file("/proc/self/cmdline").has_value());
  CHECK_FALSE(ddprun::read_file("/nonexistent/ddprun").has_value());
}
