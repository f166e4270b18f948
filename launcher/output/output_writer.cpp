#include "output/output_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include <fmt/format.h>

#include "output/output_stream.hpp"

namespace ddprun::launcher {
namespace {

// Read by the writers' threads too (their notices go through say()).
std::atomic<OutputWriter*> g_out{nullptr};
std::atomic<OutputWriter*> g_err{nullptr};
std::atomic<OutputWriter*> g_files{nullptr};

double seconds(OutputWriter::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

OutputWriter::OutputWriter(Limits limits, std::string what, std::function<void(std::string)> notice,
                           std::function<Clock::time_point()> now)
    : limits_(limits),
      what_(std::move(what)),
      notice_(std::move(notice)),
      now_(std::move(now)),
      last_progress_(now_()) {}

OutputWriter::~OutputWriter() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    thread = std::move(thread_);
  }
  wake_.notify_all();
  if (thread.joinable()) thread.join();
}

void OutputWriter::say(std::string line) const {
  if (notice_) notice_(std::move(line));
}

void OutputWriter::say_stalled() const {
  say(fmt::format("ddprun: {} took nothing for {:g} s: dropping its output until it takes some again "
                  "(--output_stall_timeout)\n", what_, seconds(limits_.stall_timeout)));
}

bool OutputWriter::stall_due(std::vector<std::function<void()>>& wakes, bool& first) {
  if (stalled_ && queued_bytes_ == 0) stalled_ = false;  // the reader is gone: its queue failed and emptied
  if (stalled_ || !holding_back()) return stalled_;
  if (now_() - last_progress_ < limits_.stall_timeout) return false;
  stalled_ = true;
  first = true;
  wakes.swap(paused_);
  return true;
}

void OutputWriter::write(int fd, std::string data, std::shared_ptr<const void> keep) {
  if (data.empty()) return;
  std::vector<std::function<void()>> wakes;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stall_due(wakes, first)) {
      dropped_ += data.size();
      dropped_unsaid_ += data.size();
    } else {
      if (queued_bytes_ == 0) last_progress_ = now_();  // an idle writer's clock starts now
      queued_bytes_ += data.size();
      peak_queued_ = std::max(peak_queued_, queued_bytes_);
      queue_.push_back(Chunk{fd, std::move(data), std::move(keep)});
      // Started with the first output: a run with none (most ddprun --version, trivial
      // workers) neither starts nor joins the thread.
      if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { run(); });
    }
  }
  wake_.notify_one();
  if (first) say_stalled();
  for (auto& wake : wakes) wake();
}

bool OutputWriter::pause(std::function<void()> wake) {
  std::vector<std::function<void()>> wakes;
  bool first = false;
  bool paused = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stall_due(wakes, first) && queued_bytes_ > limits_.high_water) {
      paused_.push_back(std::move(wake));
      paused = true;
    }
  }
  if (first) say_stalled();
  for (auto& w : wakes) w();
  return paused;
}

std::optional<OutputWriter::Clock::duration> OutputWriter::check_stall() {
  std::vector<std::function<void()>> wakes;
  bool first = false;
  std::optional<Clock::duration> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stall_due(wakes, first) && holding_back()) {
      left = std::max(Clock::duration::zero(), last_progress_ + limits_.stall_timeout - now_());
    }
  }
  if (first) say_stalled();
  for (auto& w : wakes) w();
  return left;
}

void OutputWriter::forget_paused() {
  std::lock_guard<std::mutex> lock(mutex_);
  paused_.clear();
}

bool OutputWriter::flush(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_until(lock, deadline, [this] { return queue_.empty() && !writing_; });
}

std::size_t OutputWriter::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

std::size_t OutputWriter::dropped_unsaid() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_unsaid_;
}

std::size_t OutputWriter::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_bytes_;
}

std::size_t OutputWriter::peak_queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_queued_;
}

void OutputWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    Chunk chunk = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    std::string_view rest = chunk.data;
    while (!rest.empty()) {
      lock.unlock();
      // In pieces, so that a slow reader's progress is seen piece by piece: a blocking write to
      // a pipe returns only once all of it is in.
      const ssize_t n = ::write(chunk.fd, rest.data(), std::min(rest.size(), kWritePiece));
      const int error = errno;
      lock.lock();
      if (n < 0 && error == EINTR) continue;
      // The reader is gone (EPIPE) or the file cannot take more: nothing more can be written.
      const std::size_t done = n > 0 ? static_cast<std::size_t>(n) : rest.size();
      rest.remove_prefix(done);
      queued_bytes_ -= done;
      if (n <= 0) continue;
      last_progress_ = now_();
      std::size_t lost = 0;
      if (stalled_) {
        stalled_ = false;
        lost = std::exchange(dropped_unsaid_, 0);
      }
      std::vector<std::function<void()>> wakes;
      if (queued_bytes_ <= limits_.low_water) wakes.swap(paused_);
      if (lost > 0 || !wakes.empty()) {
        lock.unlock();
        if (lost > 0) {
          say(fmt::format("ddprun: {} takes output again; {} bytes of it were dropped while it took nothing\n",
                          what_, lost));
        }
        for (auto& wake : wakes) wake();
        lock.lock();
      }
    }
    lock.unlock();
    chunk.keep.reset();
    lock.lock();
    writing_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

// Notices go to stderr through say(), not to err_ directly: a writer leaked by finish() may
// still give one after err_ is gone, and then writes it at once.
OutputWriters::OutputWriters(OutputWriter::Limits limits)
    : err_(std::make_unique<OutputWriter>(limits, "ddprun's stderr", [](std::string line) { say(line); })),
      out_(std::make_unique<OutputWriter>(limits, "the console (stdout)", [](std::string line) { say(line); })),
      files_(std::make_unique<OutputWriter>(limits, "a log file", [](std::string line) { say(line); })) {}

OutputWriters::~OutputWriters() {
  for (auto* installed : {&g_out, &g_err, &g_files}) {
    for (OutputWriter* mine : {out_.get(), err_.get(), files_.get()}) {
      OutputWriter* expected = mine;
      if (mine != nullptr) installed->compare_exchange_strong(expected, nullptr);
    }
  }
}

void OutputWriters::install() {
  g_out = out_.get();
  g_err = err_.get();
  g_files = files_.get();
}

bool OutputWriters::finish(std::chrono::milliseconds limit) {
  g_out = nullptr;
  g_files = nullptr;
  const auto deadline = OutputWriter::Clock::now() + limit;
  bool all = true;
  const auto report = [this](const OutputWriter& writer, bool flushed) {
    if (!flushed) {
      err_->write(STDERR_FILENO, fmt::format("ddprun: {} bytes for {} were not written: it did not take them "
                                             "before ddprun exited\n", writer.queued(), writer.what()));
    }
    if (const std::size_t lost = writer.dropped_unsaid(); lost > 0) {
      err_->write(STDERR_FILENO, fmt::format("ddprun: {} bytes for {} were dropped while it took nothing\n", lost,
                                             writer.what()));
    }
  };
  // stdout and files first: what they could not write is said on stderr.
  for (auto* writer : {&out_, &files_}) {
    (*writer)->forget_paused();
    const bool flushed = (*writer)->flush(deadline);
    report(**writer, flushed);
    if (!flushed) {
      (void)writer->release();  // stuck in write(): left to the exit
      all = false;
    }
  }
  err_->forget_paused();
  const bool flushed = err_->flush(std::max(deadline, OutputWriter::Clock::now() + std::chrono::seconds(1)));
  g_err = nullptr;
  if (!flushed) {
    (void)err_.release();
    all = false;
  }
  return all;
}

void write_output(int fd, std::string data, std::shared_ptr<const void> keep) {
  OutputWriter* writer = writer_for(fd);
  if (writer != nullptr) {
    writer->write(fd, std::move(data), std::move(keep));
  } else {
    write_all(fd, data);
  }
}

OutputWriter* writer_for(int fd) { return fd == STDOUT_FILENO ? g_out : fd == STDERR_FILENO ? g_err : g_files; }

void say(std::string_view line) { write_output(STDERR_FILENO, std::string(line)); }

}  // namespace ddprun::launcher
