// Everything ddprun writes while the job runs (the workers' lines on its console, their log
// files, its own messages, the event log) goes through writer threads with bounded queues, so
// the event loop never blocks on output: a stalled `| tee`, a terminal on hold, a log file system
// that stopped answering. Signals, exits, heartbeats and rendezvous messages are handled at once
// whatever the console does. One writer for stdout, one for stderr and one for files, so that
// a stalled stdout does not hold back ddprun's own messages on stderr.
//
// When a queue is full (kQueueBytes), new output for it is dropped, not waited for, and counted:
// a line on stderr says so when it starts, and how many bytes were lost once the writer has
// caught up. Dropping rather than back-pressure: a worker blocked on its own stdout would look
// hung to the watchdog.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace ddprun::launcher {

class OutputWriter {
 public:
  static constexpr std::size_t kQueueBytes = 16 << 20;

  // `notice` gets ddprun's lines about dropped output (called from the writer's thread or
  // from write()); by default they are dropped too.
  explicit OutputWriter(std::size_t queue_bytes = kQueueBytes, std::string what = "output",
                        std::function<void(std::string)> notice = nullptr);
  // Writes what is queued, then ends the thread. A writer whose flush() failed may be stuck in
  // write() for good: leak it instead (the process is about to exit, which ends the thread).
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // Queues `data` for `fd`; `keep` holds the descriptor open until it is written (a log file
  // closed meanwhile). Never blocks.
  void write(int fd, std::string data, std::shared_ptr<const void> keep = nullptr);
  // Waits until everything queued is written, or until `deadline`. True if written.
  bool flush(std::chrono::steady_clock::time_point deadline);
  bool flush(std::chrono::milliseconds limit) { return flush(std::chrono::steady_clock::now() + limit); }
  // Bytes dropped so far because the queue was full.
  std::size_t dropped() const;

 private:
  struct Chunk {
    int fd;
    std::string data;
    std::shared_ptr<const void> keep;
  };
  void run();

  const std::size_t limit_;
  const std::string what_;
  std::function<void(std::string)> notice_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Chunk> queue_;
  std::size_t queued_bytes_ = 0;
  std::size_t dropped_ = 0;
  std::size_t dropped_unsaid_ = 0;
  bool writing_ = false;
  bool stop_ = false;
  std::thread thread_;
};

// ddprun's writers while the job runs: stdout, stderr, and files.
class OutputWriters {
 public:
  OutputWriters();
  // Installs them for write_output() and say(); uninstalls on destruction.
  void install();
  // Flushes all three within `limit`; false if one could not (it is then leaked: see above).
  bool finish(std::chrono::milliseconds limit);

 private:
  std::unique_ptr<OutputWriter> err_, out_, files_;
};

// Writes through the installed writers if there are some, else at once (write_all).
void write_output(int fd, std::string data, std::shared_ptr<const void> keep = nullptr);
// A message of ddprun's own, on stderr.
void say(std::string_view line);

}  // namespace ddprun::launcher
