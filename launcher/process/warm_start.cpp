#include "process/warm_start.hpp"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <fmt/format.h>

#include "output/output_writer.hpp"

namespace ddprun::launcher {

WarmStart::WarmStart(const config::LaunchConfig& config, std::string python, std::vector<std::string> environ,
                     std::string script)
    : config_(config),
      mode_(config.warm_start),
      python_(std::move(python)),
      environ_(std::move(environ)),
      script_(std::move(script)) {
  // Other programs than Python workers start as they always do, without a word: warm start is
  // for Python workers, and a site may turn it on for every run (PET_WARM_START=on).
  if (mode_ == Mode::kOff || !config_.python_workers()) return;
  // auto forks only restarts: a run that cannot restart has nothing to gain from a zygote.
  if (mode_ == Mode::kAuto && !config_.may_restart()) return;
  const char* why_not = !config_.runs_python()
                            ? "only a .py PROGRAM or -m MODULE is forked from the warm interpreter (an interpreter "
                              "named as PROGRAM takes options of its own: give the script as PROGRAM)"
                        : config_.debug    ? "--debug keeps its worker in the terminal's foreground"
                        : script_.empty() ? "share/ddprun/python/_ddprun_zygote.py is not installed beside ddprun; "
                                            "reinstall ddprun"
                                          : nullptr;
  if (why_not != nullptr) {
    if (mode_ == Mode::kOn) say(fmt::format("ddprun: --warm_start=on: {}; the workers start cold\n", why_not));
    return;
  }
  enabled_ = true;
  std::error_code ec;
  cwd_ = std::filesystem::current_path(ec).string();
}

struct WarmStart::Wait {
  Wait(asio::io_context& io, int importing, std::function<void()> ready)
      : socket(io, ::dup(importing)), timer(io, kZygoteImportWait), ready(std::move(ready)) {}
  asio::posix::stream_descriptor socket;  // a dup of the zygote's: readable when it is ready or gone
  asio::steady_timer timer;
  std::function<void()> ready;
};

WarmStart::~WarmStart() = default;

void WarmStart::begin() {
  if (enabled_ && mode_ == Mode::kOn) replace();
}

void WarmStart::workers_progressed() {
  if (waits_for_progress()) replace();
}

void WarmStart::waits_as_spare() {
  if (enabled_ && mode_ == Mode::kAuto && !begun_) replace();
}

void WarmStart::replace() {
  begun_ = true;
  std::string why;
  zygote_ = Zygote::start(python_, script_, environ_, config_.preload, config_.module ? "" : config_.program,
                          mode_ == Mode::kAuto, why);
  if (!zygote_) {
    enabled_ = false;
    say(fmt::format("ddprun: warm start is off for this run: {}; the workers start cold\n", why));
  }
}

int WarmStart::importing_fd() {
  if (!enabled_ || !zygote_) return -1;
  return zygote_->poll() == Zygote::State::kImporting ? zygote_->fd() : -1;
}

void WarmStart::when_ready(asio::io_context& io, std::function<void()> ready) {
  cancel_wait();
  const int importing = importing_fd();
  if (importing < 0) return ready();
  zygote_->hurry();
  wait_ = std::make_unique<Wait>(io, importing, std::move(ready));
  // The first of the two ends the wait; the other's handler finds it gone, or another's.
  const auto done = [this, wait = ++waits_](std::error_code ec) {
    if (ec || !wait_ || wait != waits_) return;
    const std::function<void()> go = std::move(wait_->ready);
    cancel_wait();
    go();
  };
  wait_->socket.async_wait(asio::posix::stream_descriptor::wait_read, done);
  wait_->timer.async_wait(done);
}

void WarmStart::cancel_wait() {
  if (!wait_) return;
  wait_->timer.cancel();
  wait_->socket.cancel();
  wait_.reset();
}

void WarmStart::cold(const std::string& why) {
  if (!said_this_round_) say(fmt::format("ddprun: warm start: {}; these workers start cold\n", why));
  said_this_round_ = true;
}

pid_t WarmStart::fork(const StartRequest& request) {
  if (!enabled_ || !zygote_) return -1;  // auto before the workers' first progress: cold
  Zygote::State state = zygote_->poll();
  if (state == Zygote::State::kReady) {
    const pid_t pid = zygote_->fork_worker(request, cwd_);
    if (pid > 0) return pid;
    state = zygote_->state();
  }
  if (state == Zygote::State::kImporting) {
    cold("the warm interpreter is still importing");
    return -1;
  }
  const std::string why = zygote_->why_gone();
  if (zygote_->import_failed() || replacements_ >= kZygoteReplacements) {
    enabled_ = false;
    said_this_round_ = true;
    say(fmt::format("ddprun: warm start is off for this run: the warm interpreter {}{}{}; the workers start cold\n",
                    zygote_->import_failed() ? "failed: " : "", why,
                    zygote_->import_failed() ? "" : fmt::format(" (replaced {} times already)", replacements_)));
    zygote_.reset();
    return -1;
  }
  cold(fmt::format("the warm interpreter is gone: {}; a new one is starting", why));
  ++replacements_;
  replace();
  return -1;
}

bool WarmStart::reaped(pid_t pid, int status) {
  if (!zygote_ || pid != zygote_->pid()) return false;
  zygote_->exited(status);
  return true;
}

}  // namespace ddprun::launcher
