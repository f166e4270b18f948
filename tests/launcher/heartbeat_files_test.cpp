// Heartbeat files through a real inotify: a touch is one beat of that rank.
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
#include <asio/steady_timer.hpp>

#include "hangs/heartbeat_files.hpp"
#include "run_until.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using ddprun::UniqueFd;
using ddprun::launcher::testing::run_until;
using ddprun::launcher::testing::temp_dir;

TEST_CASE("heartbeat files: touching a rank's file is one beat of that rank") {
  asio::io_context io;
  const std::string dir = temp_dir();
  std::vector<int> beats;
  HeartbeatFiles files(io, UniqueFd(), [&](int rank) { beats.push_back(rank); });
  files.watch(0, dir + "/hb0");
  files.watch(1, dir + "/hb1");
  io.poll();
  io.restart();
  CHECK(beats.empty());  // creating them is not a beat
  REQUIRE(::utimensat(AT_FDCWD, (dir + "/hb1").c_str(), nullptr, 0) == 0);
  run_until(io, [&] { return !beats.empty(); });
  CHECK(beats == std::vector<int>{1});
  files.clear();
  REQUIRE(::utimensat(AT_FDCWD, (dir + "/hb0").c_str(), nullptr, 0) == 0);
  asio::steady_timer settle(io, std::chrono::milliseconds(200));
  settle.wait();
  io.poll();
  CHECK(beats == std::vector<int>{1});  // no longer watched
  std::filesystem::remove_all(dir);
}
