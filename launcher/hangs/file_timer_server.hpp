// The server side of torchelastic's FileTimerClient (torch.distributed.elastic.timer): with
// TORCHELASTIC_ENABLE_FILE_TIMER=1, ddprun makes the named pipe TORCHELASTIC_TIMER_FILE, reads
// its requests (one JSON object a line: {"version": 1, "pid": P, "scope_id": S,
// "expiration_time": T, "signal": N}, T in seconds since the epoch, negative to release) and
// says when an acquired timer expired, as torchrun's FileTimerServer does.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include "output/line_splitter.hpp"
#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

struct ExpiredTimer {
  pid_t pid = 0;
  std::string scope_id;
  int signal = 0;          // what the client asked the server to kill it with; 0: none
  double expired_at = 0;   // seconds since the epoch
};

// The timers held, by (pid, scope): what the server knows at any moment. Pure, for tests.
class FileTimers {
 public:
  // Applies one request line; false (and nothing changes) when it is not a valid request.
  bool apply(std::string_view line);
  // Removes and returns the timers expired at `now` (seconds since the epoch), earliest first.
  std::vector<ExpiredTimer> take_expired(double now);
  // The earliest expiration held, if any.
  std::optional<double> next_expiry() const;
  void clear() { timers_.clear(); }

 private:
  std::map<std::pair<pid_t, std::string>, std::pair<double, int>> timers_;
};

class FileTimerServer {
 public:
  // Makes the pipe at `path` (replacing what is there). `expired` runs on the event loop.
  FileTimerServer(asio::io_context& io, std::string path,
                  std::function<void(const ExpiredTimer&)> expired);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }
  // Forgets every timer (the end of a round: its workers are gone).
  void clear();

 private:
  void read();
  void arm();

  std::string path_;
  std::function<void(const ExpiredTimer&)> expired_;
  asio::posix::stream_descriptor pipe_;
  UniqueFd keep_open_;  // a writer of ddprun's own, so the pipe never reads end-of-file
  asio::steady_timer timer_;
  LineSplitter splitter_;
  FileTimers timers_;
};

}  // namespace ddprun::launcher
