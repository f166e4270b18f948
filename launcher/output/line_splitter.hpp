// Splits a byte stream into whole lines, so forwarded output never mixes two ranks in a line.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

class LineSplitter {
 public:
  // A line longer than `max_line` bytes is passed on in pieces of that size.
  explicit LineSplitter(size_t max_line = 64 * 1024) : max_line_(max_line) {}

  // Calls `on_line` with each complete line in `data` (without its '\n'), keeping any
  // unfinished tail for the next call.
  void feed(std::string_view data, const std::function<void(std::string_view)>& on_line);
  // Passes on the unfinished tail, if any, as a line.
  void flush(const std::function<void(std::string_view)>& on_line);

 private:
  size_t max_line_;
  std::string partial_;
};

}  // namespace ddprun::launcher
