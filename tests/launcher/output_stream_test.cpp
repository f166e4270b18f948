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
#include "process/unique_fd.hpp"
#include "read_all.hpp"

using namespace ddprun::launcher;

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
