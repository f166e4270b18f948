// The hang policy as tables of beats and times; the file timers; the stack-file reader; the
// status responses. The components with I/O (inotify, the timer pipe, HTTP) run for real.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "hangs/file_timer_server.hpp"
#include "hangs/hang_policy.hpp"
#include "hangs/heartbeat_files.hpp"
#include "hangs/stack_dump.hpp"
#include "report/status_server.hpp"
#include "run_until.hpp"

using namespace ddprun::launcher;
using ddprun::config::HangTimeout;

namespace {

using ddprun::launcher::testing::run_until;

HangTimeout fixed(double seconds, double startup) { return {HangTimeout::Mode::kFixed, seconds, startup}; }
HangTimeout automatic(double floor, double startup) { return {HangTimeout::Mode::kAuto, floor, startup}; }

std::vector<int> hung_ranks(const HangPolicy& p, double now) {
  std::vector<int> out;
  for (const auto& h : p.hung(now)) out.push_back(h.local_rank);
  return out;
}

std::string temp_dir() {
  std::string pattern = std::filesystem::temp_directory_path().string() + "/ddprun-watchdog-XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

}  // namespace

TEST_CASE("off: nothing is ever hung") {
  HangPolicy p(HangTimeout{});
  p.start_round(2, 0);
  CHECK(hung_ranks(p, 1e6).empty());
  CHECK_FALSE(p.next_check(0).has_value());
}

TEST_CASE("fixed: silent longer than the timeout since the last beat, or than --hang_startup since the start") {
  HangPolicy p(fixed(5, 5));
  p.start_round(3, 100);
  CHECK(p.next_check(100) == 105);
  p.beat(0, 101);
  p.beat(1, 103);
  CHECK(hung_ranks(p, 104.9).empty());
  CHECK(hung_ranks(p, 105) == std::vector<int>{2});          // never beat: judged from the start
  CHECK(hung_ranks(p, 106.5) == std::vector<int>{2, 0});     // longest silent first
  CHECK(hung_ranks(p, 108) == std::vector<int>{2, 0, 1});
  const auto h = p.hung(106.5);
  CHECK(h[1].silent_for == doctest::Approx(5.5));
  CHECK(h[1].timeout == 5);
  CHECK(h[1].ever_beat);
  CHECK_FALSE(h[0].ever_beat);
  p.start_round(3, 200);  // a new round forgets the beats
  CHECK(hung_ranks(p, 204).empty());
}

TEST_CASE("fixed: the start-up allowance is separate from the timeout") {
  HangPolicy p(fixed(2, 60));
  p.start_round(2, 0);
  p.beat(0, 30);  // a slow start is not a hang
  CHECK(hung_ranks(p, 31).empty());
  CHECK(hung_ranks(p, 32) == std::vector<int>{0});
  CHECK(hung_ranks(p, 59.9) == std::vector<int>{0});
  const auto h = p.hung(60);
  REQUIRE(h.size() == 2);
  CHECK(h[0].local_rank == 1);
  CHECK(h[0].timeout == 60);
}

TEST_CASE("auto: learns 5x the largest interval after the warm-up, with a floor") {
  HangPolicy p(automatic(2, 10));
  p.start_round(2, 0);
  double t = 0;
  // Warm-up: a slow first interval is not learned.
  std::optional<double> learned;
  for (double interval : {0.5, 3.0, 0.1, 0.1}) {
    t += interval;
    learned = p.beat(0, t);
    CHECK_FALSE(learned.has_value());
  }
  CHECK(p.timeout() == 0);
  CHECK(hung_ranks(p, t + 100) == std::vector<int>{1});  // rank 1 never beat: past --hang_startup
  t += 0.2;
  learned = p.beat(0, t);  // the first learned interval: 5 x 0.2 = 1 s, below the floor
  REQUIRE(learned.has_value());
  CHECK(*learned == doctest::Approx(2.0));
  t += 0.6;
  learned = p.beat(0, t);  // 5 x 0.6 = 3 s
  REQUIRE(learned.has_value());
  CHECK(*learned == doctest::Approx(3.0));
  CHECK_FALSE(p.beat(0, t + 0.1).has_value());  // shorter: the timeout does not shrink
  CHECK(p.timeout() == doctest::Approx(3.0));
  t += 0.1;
  const auto before = hung_ranks(p, t + 2.9);
  CHECK(std::find(before.begin(), before.end(), 0) == before.end());
  const auto at = hung_ranks(p, t + 3.0);
  CHECK(std::find(at.begin(), at.end(), 0) != at.end());
}

TEST_CASE("auto: a rank that never beats while another does is hung after --hang_startup") {
  HangPolicy p(automatic(1, 10));
  p.start_round(2, 0);
  p.beat(0, 2.0);
  CHECK(p.next_check(2.0) == doctest::Approx(10.0));
  CHECK(hung_ranks(p, 9.9).empty());
  const auto h = p.hung(10.0);
  REQUIRE(h.size() == 1);
  CHECK(h[0].local_rank == 1);
  CHECK_FALSE(h[0].ever_beat);
  CHECK(h[0].timeout == doctest::Approx(10.0));
}

TEST_CASE("auto: a program that never beats is not judged, and that is said once") {
  HangPolicy p(automatic(1, 4));
  p.start_round(2, 0);
  CHECK_FALSE(p.missing_heartbeats(3.9));
  CHECK(p.next_check(0) == doctest::Approx(4.0));
  CHECK(p.missing_heartbeats(4.0));
  CHECK_FALSE(p.missing_heartbeats(5.0));
  CHECK(hung_ranks(p, 1e6).empty());
  CHECK_FALSE(p.next_check(5).has_value());
}

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
    const double at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + 0.2;
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

TEST_CASE("heartbeat files: touching a rank's file is one beat of that rank") {
  asio::io_context io;
  const std::string dir = temp_dir();
  std::vector<int> beats;
  HeartbeatFiles files(io, [&](int rank) { beats.push_back(rank); });
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

TEST_CASE("top frames: Python's main thread when py-spy ran, else the native main thread") {
  const std::string eu_stack =
      "== eu-stack -p 77 ==\nPID 77 - process\nTID 78:\n#0  0x01 worker_thread\nTID 77:\n"
      "#0  0x00007f pselect\n#1  0x00005 wait_for\n#2  0x000055d94e5113d2\n#3  0x9 main\n";
  CHECK(top_frames(eu_stack, 77, 3) == std::vector<std::string>{"pselect", "wait_for", "0x000055d94e5113d2"});
  const std::string gdb =
      "== gdb -p 77 ==\nThread 1 (Thread 0x7f (LWP 77) \"train\"):\n#0  0x00007f in nanosleep () from /lib/libc.so.6\n"
      "#1  0x0000 in main ()\n";
  CHECK(top_frames(gdb, 77, 5) == std::vector<std::string>{"nanosleep () from /lib/libc.so.6", "main ()"});
  const std::string both = eu_stack +
      "== 'py-spy' dump --pid 77 ==\nProcess 77: python3 w.py\nThread 80 (idle): \"Thread-1\"\n    run (threading.py:1)\n"
      "Thread 77 (idle): \"MainThread\"\n    wait_for_data (w.py:12)\n    <module> (w.py:20)\n";
  CHECK(top_frames(both, 77, 5) == std::vector<std::string>{"wait_for_data (w.py:12)", "<module> (w.py:20)"});
  CHECK(top_frames("", 77, 5).empty());
}

TEST_CASE("stack dump of a real process, by whichever tool is installed") {
  const StackTools tools = find_stack_tools("/usr/local/bin:/usr/bin:/bin", false, "");
  if (tools.native.empty()) {
    MESSAGE("not checked: " << tools.missing);
    return;
  }
  asio::io_context io;
  const std::string dir = temp_dir();
  const pid_t child = ::fork();
  if (child == 0) {
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  StackDumper dumper(io, tools, {"PATH=/usr/bin:/bin"}, 30);
  bool done = false;
  REQUIRE(dumper.dump({{0, child, dir + "/stacks.txt"}}, [&] { done = true; }));
  CHECK_FALSE(dumper.dump({{0, child, dir + "/other.txt"}}, [] {}));  // one at a time
  run_until(io, [&] {
    for (;;) {
      int status;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      dumper.child_exited(pid);
    }
    return done;
  });
  CHECK(done);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::ifstream in(dir + "/stacks.txt");
  std::stringstream text;
  text << in.rdbuf();
  const auto frames = top_frames(text.str(), child, 10);
  CHECK_MESSAGE(!frames.empty(), text.str());
  std::filesystem::remove_all(dir);
}

TEST_CASE("the status server answers over HTTP on a free port") {
  StatusServer server("127.0.0.1", 0);
  REQUIRE(server.port() > 0);
  JobView view;
  view.phase = "running";
  view.ranks = {{0, 0, 100, true, std::nullopt, std::nullopt}};
  server.publish(view);
  httplib::Client client("127.0.0.1", server.port());
  auto health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  server.update([](JobView& v) { v.hung = "rank 0 hung"; });
  health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 503);
  auto status = client.Get("/status");
  REQUIRE(status);
  CHECK(nlohmann::json::parse(status->body)["phase"] == "running");
  auto missing = client.Get("/nothing");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK_THROWS_AS(StatusServer("127.0.0.1", server.port()), std::exception);  // in use
}
