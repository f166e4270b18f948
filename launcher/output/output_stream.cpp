#include "output/output_stream.hpp"

#include <unistd.h>

#include <cerrno>
#include <system_error>

#include <asio/post.hpp>

#include "output/output_writer.hpp"

namespace ddprun::launcher {
namespace {

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// torchrun's filter: a line is copied when one of the filters occurs in it.
bool matches_any(const std::vector<std::string>& filters, std::string_view line) {
  for (const auto& filter : filters) {
    if (line.find(filter) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

OutputStream::OutputStream(asio::io_context& io, int read_fd) : pipe_(io, read_fd), stall_timer_(io) {}

void OutputStream::start() { wait_readable(); }

void OutputStream::wait_readable() {
  pipe_.async_wait(asio::posix::stream_descriptor::wait_read,
                   [self = shared_from_this()](std::error_code ec) {
                     if (ec || !self->pipe_.is_open() || self->read_once() == ReadResult::kClosed) return;
                     if (!self->pause_if_full()) self->wait_readable();
                   });
}

bool OutputStream::pause_if_full() {
  for (const int fd : {console_fd, file ? file->get() : -1}) {
    OutputWriter* writer = fd >= 0 ? writer_for(fd) : nullptr;
    if (writer == nullptr) continue;
    // The wake comes from the writer's thread: it only posts to the event loop, which resumes
    // the stream if this pause is still the current one and the stream still exists.
    const unsigned pause = ++pause_;
    auto wake = [weak = weak_from_this(), executor = pipe_.get_executor(), pause] {
      asio::post(executor, [weak, pause] {
        if (auto self = weak.lock()) self->resume(pause);
      });
    };
    if (writer->pause(std::move(wake))) {
      if (!paused_) {
        paused_ = true;
        if (on_pause) on_pause(true);
      }
      check_stall(pause, writer);
      return true;
    }
  }
  if (paused_) {
    paused_ = false;
    if (on_pause) on_pause(false);
  }
  return false;
}

void OutputStream::resume(unsigned pause) {
  if (pause != pause_ || !paused_ || !pipe_.is_open()) return;
  stall_timer_.cancel();
  if (!pause_if_full()) wait_readable();
}

void OutputStream::check_stall(unsigned pause, OutputWriter* writer) {
  if (pause != pause_ || !paused_ || !pipe_.is_open()) return;
  // Stalling wakes this stream (through the event loop) like room in the queue does.
  const auto left = writer->check_stall();
  if (!left) return;
  stall_timer_.expires_after(*left);
  stall_timer_.async_wait([weak = weak_from_this(), pause, writer](std::error_code ec) {
    if (auto self = weak.lock(); self && !ec) self->check_stall(pause, writer);
  });
}

OutputStream::ReadResult OutputStream::read_once() {
  for (;;) {
    const ssize_t n = ::read(pipe_.native_handle(), buffer_.data(), buffer_.size());
    if (n > 0) {
      consume(std::string_view(buffer_.data(), static_cast<size_t>(n)));
      return ReadResult::kData;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return ReadResult::kEmpty;
    close();  // end of file, or an error: either way nothing more will come
    return ReadResult::kClosed;
  }
}

void OutputStream::read_available() {
  while (pipe_.is_open() && read_once() == ReadResult::kData) {
  }
}

void OutputStream::drain() {
  read_available();
  close();
}

void OutputStream::consume(std::string_view data) {
  splitter_.feed(data, [this](std::string_view line) { add_line(line); });
  emit();
  report_progress();
}

void OutputStream::report_progress() {
  if (!progress_seen_) return;
  const auto step = progress_step_;
  progress_seen_ = false;
  progress_step_.reset();
  if (on_progress) on_progress(step);
}

void OutputStream::add_line(std::string_view line) {
  if (watch_imports && (starts_with(line, "ModuleNotFoundError: ") || starts_with(line, "ImportError: "))) {
    import_error_ = line;
  }
  if (tail_lines > 0) {
    if (tail_.size() == tail_lines) tail_.pop_front();
    tail_.emplace_back(line.substr(0, kTailLineChars));
  }
  if (progress && !progress->empty()) {
    if (const auto m = config::match_progress(*progress, line)) {
      progress_seen_ = true;
      if (m->step) progress_step_ = m->step;
    }
  }
  // PyTorch 2.x prefixes what distributed code prints with "[rankN]:" itself: not twice.
  const std::string_view prefix = starts_with(line, own_tag_) ? std::string_view() : std::string_view(prefix_);
  if (console_fd >= 0) {
    pending_ += prefix;
    pending_ += line;
    pending_ += '\n';
  }
  if (file) {
    file_pending_ += line;
    file_pending_ += '\n';
  }
  if (filtered_file && matches_any(*filters, line)) {
    filtered_pending_ += prefix;
    filtered_pending_ += line;
    filtered_pending_ += '\n';
  }
}

void OutputStream::set_prefix(std::string own_prefix) {
  prefix_ = std::move(own_prefix);
  own_tag_ = std::string_view(prefix_);
  if (!own_tag_.empty() && own_tag_.back() == ' ') own_tag_.remove_suffix(1);
}

void OutputStream::emit() {
  if (!pending_.empty()) write_output(console_fd, std::move(pending_));
  if (!file_pending_.empty()) write_output(file->get(), std::move(file_pending_), file);
  if (!filtered_pending_.empty()) write_output(filtered_file->get(), std::move(filtered_pending_), filtered_file);
  pending_.clear();
  file_pending_.clear();
  filtered_pending_.clear();
}

void OutputStream::close() {
  if (!pipe_.is_open()) return;
  splitter_.flush([this](std::string_view line) { add_line(line); });
  emit();
  report_progress();
  std::error_code ignored;
  pipe_.close(ignored);
  stall_timer_.cancel();
  if (paused_) {
    paused_ = false;
    if (on_pause) on_pause(false);
  }
}

}  // namespace ddprun::launcher
