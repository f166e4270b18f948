// The output writer with real pipes and files: it never blocks the caller, and keeps a file
// open until its lines are written.
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

#include "output/output_writer.hpp"
#include "process/unique_fd.hpp"
#include "read_all.hpp"

using namespace ddprun::launcher;

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
