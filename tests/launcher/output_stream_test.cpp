// A worker's output stream with real pipes and files: whole lines with a rank prefix to the
// console, the file as written, the last failed import.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <fmt/format.h>

#include "output/output_stream.hpp"
#include "output/output_writer.hpp"
#include "ddprun/unique_fd.hpp"
#include "read_all.hpp"

using namespace ddprun::launcher;
using ddprun::Pipe;
using ddprun::UniqueFd;

TEST_CASE("an output stream prefixes whole lines for the console and keeps the file as written") {
  asio::io_context io;
  Pipe worker = Pipe::create();
  Pipe console = Pipe::create();
  Pipe file = Pipe::create();
  ::fcntl(worker.read_end.get(), F_SETFL, O_NONBLOCK);
  auto s = std::make_shared<OutputStream>(io, worker.read_end.release());
  s->set_prefix("[rank3]: ");
  s->console_fd = console.write_end.get();
  s->file = std::make_shared<UniqueFd>(std::move(file.write_end));
  s->watch_imports = true;
  s->start();
  const std::string text = "first line\nsecond ";
  REQUIRE(::write(worker.write_end.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  const std::string rest = "half\nModuleNotFoundError: No module named 'x'\nno newline at the end";
  REQUIRE(::write(worker.write_end.get(), rest.data(), rest.size()) == static_cast<ssize_t>(rest.size()));
  worker.write_end.reset();
  io.run();  // returns when the pipe has closed: nothing left to wait for
  s->drain();
  s.reset();
  console.write_end.reset();
  CHECK(read_all(console.read_end.get()) ==
        "[rank3]: first line\n[rank3]: second half\n[rank3]: ModuleNotFoundError: No module named 'x'\n"
        "[rank3]: no newline at the end\n");
  CHECK(read_all(file.read_end.get()) ==
        "first line\nsecond half\nModuleNotFoundError: No module named 'x'\nno newline at the end\n");
}

namespace {

// What a stream with `prefix` and `filters` writes to the console, the log file and the filtered
// log for `text`.
struct Written {
  std::string console, file, filtered;
};
Written stream_through(const std::string& prefix, std::vector<std::string> filters, const std::string& text) {
  asio::io_context io;
  Pipe worker = Pipe::create();
  Pipe console = Pipe::create();
  Pipe file = Pipe::create();
  Pipe filtered = Pipe::create();
  ::fcntl(worker.read_end.get(), F_SETFL, O_NONBLOCK);
  auto s = std::make_shared<OutputStream>(io, worker.read_end.release());
  s->set_prefix(prefix);
  s->console_fd = console.write_end.get();
  s->file = std::make_shared<UniqueFd>(std::move(file.write_end));
  s->filters = std::make_shared<const std::vector<std::string>>(std::move(filters));
  s->filtered_file = std::make_shared<UniqueFd>(std::move(filtered.write_end));
  s->start();
  REQUIRE(write_all(worker.write_end.get(), text));
  worker.write_end.reset();
  io.run();
  s->drain();
  s.reset();
  console.write_end.reset();
  return {read_all(console.read_end.get()), read_all(file.read_end.get()), read_all(filtered.read_end.get())};
}

}  // namespace

TEST_CASE("a line that already carries its own rank's prefix (PyTorch 2.x's [rankN]:) is not prefixed again") {
  struct Case {
    std::string line;
    std::string console;
  };
  const std::vector<Case> cases = {
      {"plain", "[rank1]: plain"},
      {"[rank1]: Traceback (most recent call last):", "[rank1]: Traceback (most recent call last):"},
      {"[rank1]:[W1126 22:00:00 ProcessGroupGloo.cpp:1] warning", "[rank1]:[W1126 22:00:00 ProcessGroupGloo.cpp:1] warning"},
      {"[rank1]:", "[rank1]:"},
      // Another rank's prefix, or one that only looks alike, is the worker's text: prefixed.
      {"[rank10]: from rank 10", "[rank1]: [rank10]: from rank 10"},
      {"[rank0]: from rank 0", "[rank1]: [rank0]: from rank 0"},
      {"[rank1] no colon", "[rank1]: [rank1] no colon"},
      {" [rank1]: indented", "[rank1]:  [rank1]: indented"},
      {"", "[rank1]: "},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    const Written w = stream_through("[rank1]: ", {}, c.line + "\n");
    CHECK(w.console == c.console + "\n");
    CHECK(w.file == c.line + "\n");  // the log file keeps what the worker wrote
  }
}

TEST_CASE("--duplicate_std*_filters: lines containing a filter also go to the filtered log, with the prefix") {
  struct Case {
    std::vector<std::string> filters;
    std::string filtered;
  };
  const std::string text = "an apple\nbanana\norange, pear\n[rank2]: apple from torch\n";
  const std::vector<Case> cases = {
      {{}, ""},
      {{"apple"}, "[rank2]: an apple\n[rank2]: apple from torch\n"},
      {{"apple", "banana"}, "[rank2]: an apple\n[rank2]: banana\n[rank2]: apple from torch\n"},
      {{"e, p"}, "[rank2]: orange, pear\n"},
      {{"kiwi"}, ""},
      {{""}, "[rank2]: an apple\n[rank2]: banana\n[rank2]: orange, pear\n[rank2]: apple from torch\n"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.filters.size());
    const Written w = stream_through("[rank2]: ", c.filters, text);
    CHECK(w.filtered == c.filtered);
    CHECK(w.file == text);
  }
}

TEST_CASE("an output stream remembers the last failed import and survives a closed console") {
  asio::io_context io;
  Pipe worker = Pipe::create();
  Pipe console = Pipe::create();
  ::fcntl(worker.read_end.get(), F_SETFL, O_NONBLOCK);
  ::signal(SIGPIPE, SIG_IGN);
  auto s = std::make_shared<OutputStream>(io, worker.read_end.release());
  s->console_fd = console.write_end.get();
  s->watch_imports = true;
  console.read_end.reset();  // nobody reads the console: EPIPE, not a crash
  const std::string text = "ImportError: cannot import name 'y'\nafter\n";
  REQUIRE(::write(worker.write_end.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  s->read_available();
  CHECK(s->import_error() == "ImportError: cannot import name 'y'");
}

TEST_CASE("an output stream stops reading while its writer is full, so its worker waits and nothing is lost") {
  ::signal(SIGPIPE, SIG_IGN);
  asio::io_context io;
  Pipe worker = Pipe::create();
  Pipe console = Pipe::create();
  ::fcntl(worker.read_end.get(), F_SETFL, O_NONBLOCK);
  OutputWriter::Limits limits;
  limits.high_water = 64 << 10;
  limits.low_water = 32 << 10;
  OutputWriters writers(limits);
  writers.install();
  auto s = std::make_shared<OutputStream>(io, worker.read_end.release());
  s->set_prefix("[rank1]: ");
  s->console_fd = console.write_end.get();  // not stdout or stderr: the files' writer takes it
  OutputWriter* writer = writer_for(s->console_fd);
  REQUIRE(writer != nullptr);
  // The console is read only once the stream has paused: until then it takes nothing.
  std::vector<bool> pauses;
  std::string text;
  std::thread reader;
  s->on_pause = [&](bool paused) {
    pauses.push_back(paused);
    if (paused && !reader.joinable()) reader = std::thread([&] { text = read_all(console.read_end.get()); });
  };
  s->start();
  constexpr int kLines = 400000;  // 4 MB: 60 times the high-water mark
  std::thread producer([&] {
    std::string chunk;
    for (int i = 0; i < kLines; ++i) {
      chunk += fmt::format("{:09d}\n", i);
      if (chunk.size() >= 50000 || i == kLines - 1) {
        write_all(worker.write_end.get(), chunk);
        chunk.clear();
      }
    }
    worker.write_end.reset();
  });
  io.run();  // returns when the pipe has closed
  producer.join();
  s->drain();
  s.reset();
  const std::size_t peak = writer->peak_queued();
  const std::size_t dropped = writer->dropped();
  CHECK(writers.finish(std::chrono::seconds(10)));
  console.write_end.reset();
  REQUIRE(reader.joinable());
  reader.join();
  CHECK(dropped == 0);
  std::string expected;
  for (int i = 0; i < kLines; ++i) expected += fmt::format("[rank1]: {:09d}\n", i);
  CHECK(text.size() == expected.size());
  const bool same = text == expected;  // every line, whole and in order
  CHECK(same);
  // Held back at the high-water mark: at most one read (16 KiB, prefixed) beyond it.
  CHECK(peak <= limits.high_water + (40 << 10));
  REQUIRE(pauses.size() >= 2);
  CHECK(pauses.front());
  CHECK_FALSE(pauses.back());
}
