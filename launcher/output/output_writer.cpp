#include "output/output_writer.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "output/output_stream.hpp"

namespace ddprun::launcher {
namespace {

OutputWriter* g_out = nullptr;
OutputWriter* g_err = nullptr;
OutputWriter* g_files = nullptr;

}  // namespace

OutputWriter::OutputWriter(std::size_t queue_bytes, std::string what, std::function<void(std::string)> notice)
    : limit_(queue_bytes), what_(std::move(what)), notice_(std::move(notice)), thread_([this] { run(); }) {}

OutputWriter::~OutputWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void OutputWriter::write(int fd, std::string data, std::shared_ptr<const void> keep) {
  if (data.empty()) return;
  bool first_drop = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queued_bytes_ + data.size() > limit_) {
      first_drop = dropped_unsaid_ == 0;
      dropped_ += data.size();
      dropped_unsaid_ += data.size();
    } else {
      queued_bytes_ += data.size();
      queue_.push_back(Chunk{fd, std::move(data), std::move(keep)});
    }
  }
  if (first_drop && notice_) {
    notice_(fmt::format("ddprun: {} is not keeping up: dropping what does not fit in {} MiB until it does\n", what_,
                        limit_ >> 20));
  }
  wake_.notify_one();
}

bool OutputWriter::flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_until(lock, deadline, [this] { return queue_.empty() && !writing_; });
}

std::size_t OutputWriter::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
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
    lock.unlock();
    write_all(chunk.fd, chunk.data);
    chunk.keep.reset();
    lock.lock();
    writing_ = false;
    queued_bytes_ -= chunk.data.size();
    if (dropped_unsaid_ > 0 && queued_bytes_ < limit_ / 2) {
      const std::size_t lost = dropped_unsaid_;
      dropped_unsaid_ = 0;
      if (notice_) {
        lock.unlock();
        notice_(fmt::format("ddprun: {} bytes of {} were dropped: it did not keep up\n", lost, what_));
        lock.lock();
      }
    }
    if (queue_.empty()) idle_.notify_all();
  }
}

OutputWriters::OutputWriters()
    : err_(std::make_unique<OutputWriter>(OutputWriter::kQueueBytes, "ddprun's stderr")),
      out_(std::make_unique<OutputWriter>(OutputWriter::kQueueBytes, "the console (stdout)",
                                          [this](std::string line) { err_->write(STDERR_FILENO, std::move(line)); })),
      files_(std::make_unique<OutputWriter>(OutputWriter::kQueueBytes, "a log file",
                                            [this](std::string line) { err_->write(STDERR_FILENO, std::move(line)); })) {}

void OutputWriters::install() {
  g_out = out_.get();
  g_err = err_.get();
  g_files = files_.get();
}

bool OutputWriters::finish(std::chrono::milliseconds limit) {
  g_out = g_err = g_files = nullptr;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool all = true;
  // stdout and files first: their notices go to stderr.
  for (auto* writer : {&out_, &files_, &err_}) {
    if (!(*writer)->flush(deadline)) {
      (void)writer->release();  // stuck in write(): left to the exit
      all = false;
    }
  }
  return all;
}

void write_output(int fd, std::string data, std::shared_ptr<const void> keep) {
  OutputWriter* writer = fd == STDOUT_FILENO ? g_out : fd == STDERR_FILENO ? g_err : g_files;
  if (writer != nullptr) {
    writer->write(fd, std::move(data), std::move(keep));
  } else {
    write_all(fd, data);
  }
}

void say(std::string_view line) { write_output(STDERR_FILENO, std::string(line)); }

}  // namespace ddprun::launcher
