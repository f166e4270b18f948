// Output forwarding, the output writer and the signal channel, each with real file descriptors
// and real signals.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include <asio/io_context.hpp>

#include "output/output_stream.hpp"
#include "output/output_writer.hpp"
#include "process/signal_channel.hpp"
#include "process/unique_fd.hpp"
#include "run_until.hpp"

using namespace ddprun::launcher;

namespace {

using ddprun::launcher::testing::run_until;

std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  return text;
}

}  // namespace

TEST_CASE("an output stream prefixes whole lines for the console and keeps the file as written") {
  asio::io_context io;
  Pipe worker = Pipe::create();
  Pipe console = Pipe::create();
  Pipe file = Pipe::create();
  ::fcntl(worker.read_end.get(), F_SETFL, O_NONBLOCK);
  auto s = std::make_shared<OutputStream>(io, worker.read_end.release());
  s->prefix = "[rank3]: ";
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

TEST_CASE("the signal channel reads blocked signals: shutdown, forwarded, child exits") {
  SignalChannel::block_signals(false);
  asio::io_context io;
  std::vector<int> shutdowns, forwarded;
  int children = 0;
  SignalChannel::Handlers h;
  h.shutdown = [&](int sig) { shutdowns.push_back(sig); };
  h.forward = [&](int sig, pid_t sender) {
    forwarded.push_back(sig);
    CHECK(sender == ::getpid());
  };
  h.child_exited = [&] { ++children; };
  SignalChannel channel(io, h);
  channel.start();
  ::kill(::getpid(), SIGTERM);  // blocked: queued for the signalfd, no handler runs
  ::kill(::getpid(), SIGUSR1);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  run_until(io, [&] { return !shutdowns.empty() && !forwarded.empty() && children > 0; });
  ::waitpid(child, nullptr, 0);
  CHECK(shutdowns == std::vector<int>{SIGTERM});
  CHECK(forwarded == std::vector<int>{SIGUSR1});
  CHECK(children >= 1);
  CHECK(is_shutdown_signal(SIGHUP));
  CHECK_FALSE(is_shutdown_signal(SIGUSR2));
  channel.close();
  ::kill(::getpid(), SIGINT);  // closed: stays pending, unread
  io.poll();
  CHECK(shutdowns.size() == 1);
  sigset_t pending;
  sigpending(&pending);
  CHECK(sigismember(&pending, SIGINT));
  // Take it off the pending set without dying, so the rest of the test binary runs.
  const timespec none{0, 0};
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, SIGINT);
  CHECK(sigtimedwait(&only, nullptr, &none) == SIGINT);
}

TEST_CASE("the output writer never blocks: a full queue drops and counts") {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe console = Pipe::create();
  ::fcntl(console.write_end.get(), F_SETPIPE_SZ, 4096);
  OutputWriter writer(10000);
  // Nobody reads yet: the pipe takes a page, then the writer thread blocks in write() and the
  // queue fills up; writes go on returning at once.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) writer.write(console.write_end.get(), std::string(1000, 'x'));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  CHECK_FALSE(writer.flush(std::chrono::milliseconds(100)));
  CHECK(writer.dropped() >= 200 * 1000 - 4096 - 10000 - 1000);
  // A reader appears: everything queued is written, in order, whole (the notice of what was
  // dropped goes to stderr).
  std::string text;
  std::thread reader([&] { text = read_all(console.read_end.get()); });
  CHECK(writer.flush(std::chrono::seconds(10)));
  console.write_end.reset();
  reader.join();
  CHECK(text.size() + writer.dropped() == 200 * 1000);
  CHECK(text.find_first_not_of('x') == std::string::npos);
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
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "one\ntwo\n");
  std::filesystem::remove(path);
}
