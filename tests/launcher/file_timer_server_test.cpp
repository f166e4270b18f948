// torchelastic's file timers: the held timers as a table, then the real named pipe a
// FileTimerClient writes to.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/clocks.hpp"
#include "hangs/file_timer_server.hpp"
#include "run_until.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using ddprun::launcher::testing::run_until;
using ddprun::launcher::testing::temp_dir;

TEST_CASE("file timers: acquire, release, expire; bad lines change nothing") {
  FileTimers t;
  CHECK(t.apply(R"({"version": 1, "pid": 10, "scope_id": "step", "expiration_time": 100.5, "signal": 9})"));
  CHECK(t.apply(R"({"version": 1, "pid": 11, "scope_id": "load", "expiration_time": 50, "signal": 15})"));
  CHECK(t.apply(R"({"version": 1, "pid": 12, "scope_id": "x", "expiration_time": 70, "signal": 0})"));
  CHECK(t.apply(R"({"version": 1, "pid": 12, "scope_id": "x", "expiration_time": -1, "signal": 0})"));  // release
  CHECK_FALSE(t.apply("not json"));
  CHECK_FALSE(t.apply(R"({"pid": "10", "scope_id": "s", "expiration_time": 1, "signal": 9})"));
  CHECK_FALSE(t.apply(R"([1, 2])"));
  CHECK(t.next_expiry() == 50);
  CHECK(t.take_expired(49.9).empty());
  const auto expired = t.take_expired(101);
  REQUIRE(expired.size() == 2);
  CHECK(expired[0].pid == 11);
  CHECK(expired[0].signal == 15);
  CHECK(expired[1].scope_id == "step");
  CHECK_FALSE(t.next_expiry().has_value());
}

TEST_CASE("the timer pipe: a FileTimerClient-style write is read and its expiry reported") {
  asio::io_context io;
  const std::string dir = temp_dir();
  std::vector<ExpiredTimer> expired;
  {
    FileTimerServer server(io, dir + "/timer", [&](const ExpiredTimer& e) { expired.push_back(e); });
    struct stat st;
    REQUIRE(::stat(server.path().c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    // As FileTimerClient: open non-blocking for writing (fails when no server reads), one line.
    const int fd = ::open(server.path().c_str(), O_WRONLY | O_NONBLOCK);
    REQUIRE(fd >= 0);
    const double at = ddprun::wall_seconds() + 0.2;
    const std::string line = nlohmann::json{{"version", 1}, {"pid", 4242}, {"scope_id", "s"}, {"expiration_time", at}, {"signal", 9}}.dump() + "\n";
    REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
    ::close(fd);
    run_until(io, [&] { return !expired.empty(); });
    REQUIRE(expired.size() == 1);
    CHECK(expired[0].pid == 4242);
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/timer"));  // removed with the server
  std::filesystem::remove_all(dir);
}
