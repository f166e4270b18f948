// Output forwarding: one stream (stdout or stderr) of one worker, read from its pipe on the
// event loop, split into lines, written with the rank prefix to the console and as-is to the
// worker's log file, through the output writers (output_writer.hpp): never blocking. When a
// writer it feeds is full, the stream stops reading its pipe until the writer wakes it, so the
// worker waits in its own write() and nothing is lost.
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include "ddprun/progress_pattern.hpp"
#include "output/line_splitter.hpp"
#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

class OutputWriter;

// Writes all of `data` to `fd`, retrying on EINTR and short writes. False once the reader is gone.
bool write_all(int fd, std::string_view data);

class OutputStream : public std::enable_shared_from_this<OutputStream> {
 public:
  // Takes ownership of `read_fd`, which must be non-blocking.
  OutputStream(asio::io_context& io, int read_fd);

  // Where lines go; set before start().
  // The console prefix, e.g. "[rank3]: ". A line that already starts with it, without its last
  // space ("[rank3]:", PyTorch 2.x's own prefix of distributed code's tracebacks and C++ logs),
  // is shown as it is.
  void set_prefix(std::string own_prefix);
  int console_fd = -1;     // -1: not shown
  std::shared_ptr<UniqueFd> file;  // not written when null
  // --duplicate_std*_filters: a line containing one of `filters` also goes, with the prefix, to
  // `filtered_file` (shared by the attempt's ranks; one write a read, so lines stay whole).
  std::shared_ptr<const std::vector<std::string>> filters;
  std::shared_ptr<UniqueFd> filtered_file;
  // A Python worker's stderr: remember the last line that reported a failed import.
  bool watch_imports = false;
  // Keep the last this many lines (each cut to kTailLineChars), for the failure's kind.
  std::size_t tail_lines = 0;
  static constexpr std::size_t kTailLineChars = 1024;
  // Called with true when the stream stops reading because a writer it feeds is full, and with
  // false when it reads again (the watchdog does not count a paused worker's silence).
  std::function<void(bool paused)> on_pause;
  // --progress_pattern: when a line matches one of `progress` (searched in place, each 64 KiB
  // piece of a longer line on its own), `on_progress` is called once per read, after its lines,
  // with the step of the last matching line that had one.
  std::shared_ptr<const std::vector<config::ProgressPattern>> progress;
  std::function<void(std::optional<long long> step)> on_progress;

  // Reads whenever the pipe is readable, until it closes, pausing while a writer it feeds is
  // full (output_writer.hpp). Data never waits inside asio, so drain() at the end of a round
  // sees everything in order.
  void start();
  // Reads what the pipe holds right now, without waiting for more (nor for a full writer).
  void read_available();
  // The same, then passes on a last unfinished line and closes the pipe.
  void drain();

  // The last "ModuleNotFoundError: ..." or "ImportError: ..." line seen (watch_imports only).
  const std::string& import_error() const { return import_error_; }
  // The last tail_lines lines, oldest first (an unfinished last line is not among them).
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  enum class ReadResult { kData, kEmpty, kClosed };
  ReadResult read_once();
  void wait_readable();
  // Pauses if a writer this stream feeds is full; false if it may read on.
  bool pause_if_full();
  void resume(unsigned pause);
  void check_stall(unsigned pause, OutputWriter* writer);
  void consume(std::string_view data);
  void add_line(std::string_view line);
  void report_progress();
  void emit();
  void close();

  asio::posix::stream_descriptor pipe_;
  asio::steady_timer stall_timer_;  // while paused: when the full writer could stall
  bool paused_ = false;
  unsigned pause_ = 0;  // which pause a wake is for
  LineSplitter splitter_;
  // A read's scratch space, left uninitialised: zeroing it cost every worker's start two
  // memsets of 16 KiB and the page faults of both, for pipes that mostly carry a few lines.
  std::array<char, 16 * 1024> buffer_;
  std::string pending_;       // console lines of one read, queued together
  std::string file_pending_;  // the same lines for the log file
  std::string filtered_pending_;  // those that match `filters`, for filtered_file
  std::string prefix_;
  std::string_view own_tag_;  // prefix_ without its trailing space
  std::string import_error_;
  std::deque<std::string> tail_;
  bool progress_seen_ = false;              // since the last report_progress()
  std::optional<long long> progress_step_;  // the same
};

}  // namespace ddprun::launcher
