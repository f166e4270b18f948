#include "output/line_splitter.hpp"

namespace ddprun::launcher {

void LineSplitter::feed(std::string_view data,
                        const std::function<void(std::string_view)>& on_line) {
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    const size_t take = newline == std::string_view::npos ? data.size() : newline;
    if (partial_.empty() && newline != std::string_view::npos && take <= max_line_) {
      on_line(data.substr(0, take));  // the common case: no copy
    } else {
      partial_.append(data.substr(0, take));
      while (partial_.size() > max_line_) {
        on_line(std::string_view(partial_).substr(0, max_line_));
        partial_.erase(0, max_line_);
      }
      if (newline != std::string_view::npos) {
        on_line(partial_);
        partial_.clear();
      }
    }
    data.remove_prefix(newline == std::string_view::npos ? data.size() : newline + 1);
  }
}

void LineSplitter::flush(const std::function<void(std::string_view)>& on_line) {
  if (partial_.empty()) return;
  on_line(partial_);
  partial_.clear();
}

}  // namespace ddprun::launcher
