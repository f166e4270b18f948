// Everything ddprun writes while the job runs (the workers' lines on its console, their log
// files, its own messages, the event log) goes through writer threads, so the event loop never
// blocks on output: a slow or stalled `| tee`, a terminal on hold, a log file system that stopped
// answering. Signals, exits, heartbeats and rendezvous messages are handled at once whatever the
// console does. One writer for stdout, one for stderr and one for files, so that a stalled stdout
// does not hold back ddprun's own messages on stderr.
//
// Back-pressure, not loss. A writer holding more than its high-water mark tells the worker
// streams that feed it to pause (pause()): they stop reading their pipes, so a worker that
// outruns its console waits in its own write(), as it would without ddprun, and its lines wait in
// the pipe, whole and in order. They read again once the writer is down to its low-water mark.
// A worker waiting so is not hung: the watchdog does not count that time (hangs/hang_policy.hpp).
//
// Output is dropped only when the reader has made no progress at all, not one write, for the
// stall timeout (--output_stall_timeout, default 30 s: a stopped `| less`, a terminal on hold)
// while the queue is above its high-water mark: the streams then read on so that the workers go
// on, what they write for that reader is counted and dropped, and a line on stderr says so. As
// soon as the reader takes something again, a line says how many bytes were lost, and
// back-pressure resumes. The queue is bounded: the high-water mark, plus one read of each stream
// that was already under way, plus what the pipes held when a round ended.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ddprun::launcher {

class OutputWriter {
 public:
  using Clock = std::chrono::steady_clock;
  // A writer's limits; the defaults are ddprun's.
  struct Limits {
    std::size_t high_water = 1 << 20;  // streams pause above this many queued bytes
    std::size_t low_water = 1 << 19;   // and read again at or below this many
    Clock::duration stall_timeout = std::chrono::seconds(30);  // no progress that long: drop
  };
  // What one write() syscall takes at most: the unit of progress of a slow reader.
  static constexpr std::size_t kWritePiece = 16 << 10;

  // `what` names the reader in notices ("the console (stdout)"); `notice` gets ddprun's lines
  // about dropped output (from the writer's thread, or from the caller of write(), pause() or
  // check_stall()); by default they are lost. `now` is the clock (tests give their own).
  OutputWriter(Limits limits, std::string what, std::function<void(std::string)> notice = nullptr,
               std::function<Clock::time_point()> now = Clock::now);
  OutputWriter() : OutputWriter(Limits{}, "output") {}
  // Writes what is queued, then ends the thread. A writer whose flush() failed may be stuck in
  // write() for good: leak it instead (the process is about to exit, which ends the thread).
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // Queues `data` for `fd`; `keep` holds the descriptor open until it is written (a log file
  // closed meanwhile). Never blocks; drops (and counts) only while the reader is stalled.
  void write(int fd, std::string data, std::shared_ptr<const void> keep = nullptr);

  // Back-pressure. True when the queue is above the high-water mark and the reader is not
  // stalled: the caller should stop producing until `wake` is called, once, from the writer's
  // thread (the queue is down to the low-water mark) or from check_stall() (the writer stalled
  // and now drops). False: go on; `wake` is not kept.
  bool pause(std::function<void()> wake);
  // Asked by a paused producer when the time it was given has passed: the writer stalls (and
  // wakes the paused) if it made no progress for the stall timeout while holding producers
  // back. Returns how long until it could stall, or nullopt when there is nothing to wait for.
  std::optional<Clock::duration> check_stall();
  // Forgets the paused producers without waking them (the event loop they post to is gone).
  void forget_paused();

  // Waits until everything queued is written, or until `deadline`. True if written.
  bool flush(Clock::time_point deadline);
  bool flush(std::chrono::milliseconds limit) { return flush(Clock::now() + limit); }

  const std::string& what() const { return what_; }
  const Limits& limits() const { return limits_; }
  // Bytes dropped so far because the reader was stalled.
  std::size_t dropped() const;
  // Of those, bytes no notice has counted yet (the reader has not recovered).
  std::size_t dropped_unsaid() const;
  // Bytes queued and not yet written, and the most there ever were.
  std::size_t queued() const;
  std::size_t peak_queued() const;

 private:
  struct Chunk {
    int fd;
    std::string data;
    std::shared_ptr<const void> keep;
  };
  void run();
  // Under the lock: whether producers are (or would be) held back: the queue is above the
  // high-water mark, or producers paused when it was (it may have gone down since, not yet to
  // the low-water mark that wakes them).
  bool holding_back() const { return queued_bytes_ > limits_.high_water || (!paused_.empty() && queued_bytes_ > 0); }
  // Under the lock: true if producers are held back with no progress for the stall timeout;
  // then stalls, moving the paused producers' wakes into `wakes`.
  bool stall_due(std::vector<std::function<void()>>& wakes, bool& first);
  void say(std::string line) const;
  void say_stalled() const;

  const Limits limits_;
  const std::string what_;
  std::function<void(std::string)> notice_;
  std::function<Clock::time_point()> now_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Chunk> queue_;
  std::size_t queued_bytes_ = 0;  // including the unwritten rest of the chunk being written
  std::size_t peak_queued_ = 0;
  Clock::time_point last_progress_;  // the last write that took bytes, or when the queue filled
  bool stalled_ = false;
  std::size_t dropped_ = 0;
  std::size_t dropped_unsaid_ = 0;
  std::vector<std::function<void()>> paused_;
  bool writing_ = false;
  bool stop_ = false;
  std::thread thread_;  // started by the first write()
};

// ddprun's writers while the job runs: stdout, stderr, and files.
class OutputWriters {
 public:
  explicit OutputWriters(OutputWriter::Limits limits = {});
  ~OutputWriters();
  OutputWriters(const OutputWriters&) = delete;
  OutputWriters& operator=(const OutputWriters&) = delete;
  // Installs them for write_output(), writer_for() and say(); uninstalls on destruction.
  void install();
  // Flushes all three within `limit` (stderr, which takes the notices, at least 1 s more); says
  // on stderr what the others could not write, and what they dropped that no notice counted.
  // False if one could not (it is then leaked: see above).
  bool finish(std::chrono::milliseconds limit);

 private:
  std::unique_ptr<OutputWriter> err_, out_, files_;
};

// Writes through the installed writers if there are some, else at once (write_all).
void write_output(int fd, std::string data, std::shared_ptr<const void> keep = nullptr);
// The installed writer that takes `fd` (stdout, stderr, or the files'); nullptr if none.
OutputWriter* writer_for(int fd);
// A message of ddprun's own, on stderr.
void say(std::string_view line);

}  // namespace ddprun::launcher
