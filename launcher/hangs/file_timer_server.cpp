#include "hangs/file_timer_server.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <system_error>

#include <nlohmann/json.hpp>

#include "ddprun/clocks.hpp"

namespace ddprun::launcher {

bool FileTimers::apply(std::string_view line) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const auto pid = j.find("pid");
  const auto scope = j.find("scope_id");
  const auto expiration = j.find("expiration_time");
  const auto signal = j.find("signal");
  if (pid == j.end() || !pid->is_number_integer() || scope == j.end() || !scope->is_string() ||
      expiration == j.end() || !expiration->is_number() || signal == j.end() ||
      !signal->is_number_integer()) {
    return false;
  }
  const double at = expiration->get<double>();
  if (!std::isfinite(at)) return false;
  auto key = std::make_pair(pid->get<pid_t>(), scope->get<std::string>());
  if (at < 0) {
    timers_.erase(key);  // release
  } else {
    timers_[std::move(key)] = {at, signal->get<int>()};
  }
  return true;
}

std::vector<ExpiredTimer> FileTimers::take_expired(double now) {
  std::vector<ExpiredTimer> out;
  for (auto it = timers_.begin(); it != timers_.end();) {
    if (it->second.first <= now) {
      out.push_back(ExpiredTimer{it->first.first, it->first.second, it->second.second, it->second.first});
      it = timers_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.expired_at < b.expired_at; });
  return out;
}

std::optional<double> FileTimers::next_expiry() const {
  std::optional<double> earliest;
  for (const auto& [key, value] : timers_) {
    if (!earliest || value.first < *earliest) earliest = value.first;
  }
  return earliest;
}

FileTimerServer::FileTimerServer(asio::io_context& io, std::string path,
                                 std::function<void(const ExpiredTimer&)> expired)
    : path_(std::move(path)), expired_(std::move(expired)), pipe_(io), timer_(io) {
  ::unlink(path_.c_str());
  if (::mkfifo(path_.c_str(), 0600) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot make the timer pipe " + path_);
  }
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + path_);
  pipe_.assign(fd);
  keep_open_.reset(::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  read();
}

FileTimerServer::~FileTimerServer() {
  std::error_code ignored;
  pipe_.close(ignored);
  timer_.cancel();
  ::unlink(path_.c_str());
}

void FileTimerServer::clear() {
  timers_.clear();
  timer_.cancel();
}

void FileTimerServer::read() {
  pipe_.async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
    if (ec || !pipe_.is_open()) return;
    std::array<char, 4096> buffer;
    for (;;) {
      const ssize_t n = ::read(pipe_.native_handle(), buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      // A line that is not a request is ignored, as FileTimerServer would fail on it alone.
      splitter_.feed(std::string_view(buffer.data(), static_cast<size_t>(n)),
                     [this](std::string_view line) { timers_.apply(line); });
    }
    arm();
    read();
  });
}

void FileTimerServer::arm() {
  const auto next = timers_.next_expiry();
  if (!next) {
    timer_.cancel();
    return;
  }
  const double wait = std::max(0.0, std::min(*next - wall_seconds(), 86400.0 * 365));
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(wait)));
  timer_.async_wait([this](std::error_code ec) {
    if (ec) return;
    for (const auto& expired : timers_.take_expired(wall_seconds())) expired_(expired);
    arm();
  });
}

}  // namespace ddprun::launcher
