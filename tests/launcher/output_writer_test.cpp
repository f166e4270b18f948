// The output writer with real pipes and files: it never blocks the caller; above its high-water
// mark it asks its producers to pause and wakes them at its low-water mark; it drops only after
// its reader took nothing for the stall timeout (a clock the test moves); it keeps a file open
// until its lines are written.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>

#include "ddprun/system.hpp"
#include "output/output_writer.hpp"
#include "ddprun/unique_fd.hpp"
#include "read_all.hpp"

using namespace ddprun::launcher;
using ddprun::Pipe;
using ddprun::UniqueFd;

namespace {

using Clock = OutputWriter::Clock;

// A clock that moves only when the test says so.
struct FakeClock {
  std::atomic<long long> ns{1'000'000'000};
  std::function<Clock::time_point()> now() {
    return [this] { return Clock::time_point(std::chrono::nanoseconds(ns.load())); };
  }
  void advance(std::chrono::duration<double> d) {
    ns += std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
};

// The notices a writer gives, from any thread.
struct Notices {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(std::string)> sink() {
    return [this](std::string line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(std::move(line));
    };
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mutex);
    return lines;
  }
};

OutputWriter::Limits limits(std::size_t high, std::size_t low, std::chrono::seconds stall) {
  OutputWriter::Limits l;
  l.high_water = high;
  l.low_water = low;
  l.stall_timeout = stall;
  return l;
}

}  // namespace

TEST_CASE("the output writer never blocks: above its high-water mark it asks to pause, at its low-water mark it wakes") {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe console = Pipe::create();
  ::fcntl(console.write_end.get(), F_SETPIPE_SZ, 4096);
  FakeClock clock;
  OutputWriter writer(limits(10000, 5000, std::chrono::seconds(30)), "the console", nullptr, clock.now());
  // Nobody reads yet: the pipe takes a page, then the writer thread blocks in write() and the
  // queue grows past its high-water mark; writes go on returning at once, and keep everything.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) writer.write(console.write_end.get(), std::string(1000, 'x'));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  CHECK_FALSE(writer.flush(std::chrono::milliseconds(100)));
  CHECK(writer.dropped() == 0);
  CHECK(writer.peak_queued() >= 20000 - 4096);  // the pipe may have taken its page meanwhile
  std::atomic<bool> woken{false};
  std::atomic<std::size_t> queued_at_wake{0};
  CHECK(writer.pause([&] {
    queued_at_wake = writer.queued();
    woken = true;
  }));
  // No progress yet, and no time passed: the stall timeout is still all ahead.
  CHECK(writer.check_stall() == std::chrono::seconds(30));
  CHECK_FALSE(woken);
  // A reader appears: the producer is woken once the queue is down to the low-water mark, and
  // everything is written, in order, whole.
  std::string text;
  std::thread reader([&] { text = read_all(console.read_end.get()); });
  CHECK(writer.flush(std::chrono::seconds(10)));
  console.write_end.reset();
  reader.join();
  CHECK(woken);
  CHECK(queued_at_wake <= 5000);
  CHECK(text == std::string(20000, 'x'));
  CHECK_FALSE(writer.pause([] {}));  // empty: no reason to pause
}

TEST_CASE("the output writer drops only after its reader took nothing for the stall timeout, and counts") {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe console = Pipe::create();
  ::fcntl(console.write_end.get(), F_SETPIPE_SZ, 4096);
  // The pipe is full before the writer starts, so that its thread makes no progress at all
  // until the reader below: a first write that came late, once the fake clock had moved, was
  // progress at 29 s, and the writer never stalled (it failed so under ASan on the loaded VM).
  const std::string full(4096, 'p');
  REQUIRE(::write(console.write_end.get(), full.data(), full.size()) == 4096);
  FakeClock clock;
  Notices notices;
  OutputWriter writer(limits(10000, 5000, std::chrono::seconds(30)), "the console", notices.sink(), clock.now());
  for (int i = 0; i < 20; ++i) writer.write(console.write_end.get(), std::string(1000, 'x'));
  std::atomic<int> woken{0};
  REQUIRE(writer.pause([&] { ++woken; }));
  // 29 s without progress: slow is not stalled; nothing is dropped.
  clock.advance(std::chrono::seconds(29));
  const auto left = writer.check_stall();
  REQUIRE(left.has_value());
  CHECK(*left == std::chrono::seconds(1));
  writer.write(console.write_end.get(), std::string(1000, 'y'));
  CHECK(writer.dropped() == 0);
  CHECK(woken == 0);
  // 30 s: stalled. The paused producer is woken to read on, what comes is dropped and counted,
  // and it is said once.
  clock.advance(std::chrono::seconds(1));
  CHECK_FALSE(writer.check_stall().has_value());
  CHECK(woken == 1);
  writer.write(console.write_end.get(), std::string(500, 'z'));
  writer.write(console.write_end.get(), std::string(500, 'z'));
  CHECK_FALSE(writer.pause([&] { ++woken; }));
  CHECK(writer.dropped() == 1000);
  CHECK(writer.dropped_unsaid() == 1000);
  REQUIRE(notices.get().size() == 1);
  CHECK(notices.get()[0] ==
        "ddprun: the console took nothing for 30 s: dropping its output until it takes some again "
        "(--output_stall_timeout)\n");
  // The reader takes something again: what was queued is all written, the loss is counted in a
  // second notice, and new output is queued (and held back) again, not dropped.
  std::string text;
  std::thread reader([&] { text = read_all(console.read_end.get()); });
  CHECK(writer.flush(std::chrono::seconds(10)));
  writer.write(console.write_end.get(), "after\n");
  CHECK(writer.flush(std::chrono::seconds(10)));
  console.write_end.reset();
  reader.join();
  CHECK(text == full + std::string(20000, 'x') + std::string(1000, 'y') + "after\n");
  CHECK(writer.dropped() == 1000);
  CHECK(writer.dropped_unsaid() == 0);
  const auto said = notices.get();
  REQUIRE(said.size() == 2);
  CHECK(said[1] == "ddprun: the console takes output again; 1000 bytes of it were dropped while it took nothing\n");
  CHECK(woken == 1);
}

TEST_CASE("the output writer stalls between its low- and high-water marks too, when producers wait") {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe console = Pipe::create();
  ::fcntl(console.write_end.get(), F_SETPIPE_SZ, 4096);
  const std::string page(4096, 'p');
  REQUIRE(::write(console.write_end.get(), page.data(), page.size()) == 4096);  // the pipe is full
  FakeClock clock;
  OutputWriter writer(limits(10000, 5000, std::chrono::seconds(30)), "the console", nullptr, clock.now());
  for (int i = 0; i < 11; ++i) writer.write(console.write_end.get(), std::string(1000, 'x'));
  std::atomic<int> woken{0};
  REQUIRE(writer.pause([&] { ++woken; }));
  // The reader takes one page and stops: the writer gets 4 chunks in, down to 7000 bytes, above
  // the low-water mark, so the producer stays paused; the stall clock must go on for it.
  char buffer[4096];
  REQUIRE(::read(console.read_end.get(), buffer, sizeof buffer) == 4096);
  for (int i = 0; i < 10000 && writer.queued() != 7000; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(writer.queued() == 7000);
  CHECK(woken == 0);
  CHECK(writer.check_stall() == std::chrono::seconds(30));
  clock.advance(std::chrono::seconds(30));
  CHECK_FALSE(writer.check_stall().has_value());
  CHECK(woken == 1);
  std::string text;
  std::thread reader([&] { text = read_all(console.read_end.get()); });
  CHECK(writer.flush(std::chrono::seconds(10)));
  console.write_end.reset();
  reader.join();
  CHECK(text == std::string(11000, 'x'));  // stalled, but what was queued is kept
}

TEST_CASE("the output writer's paused producers are forgotten, not woken, when the writers finish") {
  Pipe console = Pipe::create();
  ::fcntl(console.write_end.get(), F_SETPIPE_SZ, 4096);
  OutputWriter writer(limits(1000, 500, std::chrono::seconds(30)), "the console");
  writer.write(console.write_end.get(), std::string(8000, 'x'));
  bool woken = false;
  REQUIRE(writer.pause([&] { woken = true; }));
  writer.forget_paused();
  std::string text;
  std::thread reader([&] { text = read_all(console.read_end.get()); });
  CHECK(writer.flush(std::chrono::seconds(10)));
  console.write_end.reset();
  reader.join();
  CHECK(text.size() == 8000);
  CHECK_FALSE(woken);
}

TEST_CASE("the output writer keeps a file open until its lines are written") {
  const std::string path = std::filesystem::temp_directory_path().string() + "/ddprun-writer-" + std::to_string(::getpid());
  {
    OutputWriter writer;
    auto file = std::make_shared<UniqueFd>(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    REQUIRE(*file);
    writer.write(file->get(), "one\n", file);
    writer.write(file->get(), "two\n", file);
    file.reset();  // the owner lets go; the writer still holds it
    CHECK(writer.flush(std::chrono::seconds(10)));
  }
  CHECK(ddprun::read_file(path).value_or("") == "one\ntwo\n");
  std::filesystem::remove(path);
}
