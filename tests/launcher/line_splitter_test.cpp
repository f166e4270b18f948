#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "output/line_splitter.hpp"

using ddprun::launcher::LineSplitter;

namespace {

std::vector<std::string> split(const std::vector<std::string>& chunks, size_t max_line = 64 * 1024) {
  LineSplitter splitter(max_line);
  std::vector<std::string> lines;
  const auto collect = [&](std::string_view line) { lines.emplace_back(line); };
  for (const auto& chunk : chunks) splitter.feed(chunk, collect);
  splitter.flush(collect);
  return lines;
}

}  // namespace

TEST_CASE("whole lines come out whatever the chunking") {
  using V = std::vector<std::string>;
  CHECK(split({"a\nb\n"}) == V{"a", "b"});
  CHECK(split({"a", "b\nc", "\n"}) == V{"ab", "c"});
  CHECK(split({"\n\n"}) == V{"", ""});
  CHECK(split({"tail without newline"}) == V{"tail without newline"});
  CHECK(split({"x\n", "", "y"}) == V{"x", "y"});
  CHECK(split({}) == V{});
}

TEST_CASE("over-long lines are passed on in pieces") {
  using V = std::vector<std::string>;
  CHECK(split({"abcdefg\n"}, 3) == V{"abc", "def", "g"});
  CHECK(split({"ab", "cd", "ef\nxy\n"}, 3) == V{"abc", "def", "xy"});
}
