#include "process/signal_channel.hpp"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <fstream>
#include <string>
#include <system_error>

namespace ddprun::launcher {
namespace {

constexpr std::array kShutdownSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr std::array kForwardedSignals = {SIGUSR1, SIGUSR2};

sigset_t read_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : kShutdownSignals) sigaddset(&set, sig);
  for (int sig : kForwardedSignals) sigaddset(&set, sig);
  return set;
}

}  // namespace

bool is_shutdown_signal(int sig) {
  return std::find(kShutdownSignals.begin(), kShutdownSignals.end(), sig) != kShutdownSignals.end();
}

bool sent_by_slurmstepd(pid_t sender) {
  if (sender <= 0) return false;
  std::ifstream comm("/proc/" + std::to_string(sender) + "/comm");
  std::string name;
  return std::getline(comm, name) && name == "slurmstepd";
}

SignalChannel::SignalChannel(asio::io_context& io, Handlers handlers)
    : fd_(io), handlers_(std::move(handlers)) {}

void SignalChannel::block_signals(bool debug) {
  sigset_t set = read_set();
  if (debug) {
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGQUIT, SIG_IGN);
    sigdelset(&set, SIGINT);
    sigdelset(&set, SIGQUIT);
  }
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  // ddprun writes to pipes that may close (ddprun ... | head): see EPIPE, not die of SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
}

void SignalChannel::start() {
  const sigset_t set = read_set();
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
  fd_.assign(fd);
  wait();
}

void SignalChannel::close() {
  std::error_code ignored;
  fd_.close(ignored);
}

void SignalChannel::wait() {
  fd_.async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
    if (ec || !fd_.is_open()) return;
    signalfd_siginfo info;
    while (fd_.is_open() && ::read(fd_.native_handle(), &info, sizeof info) == sizeof info) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        handlers_.child_exited();
      } else if (is_shutdown_signal(sig)) {
        handlers_.shutdown(sig);
      } else {
        handlers_.forward(sig, static_cast<pid_t>(info.ssi_pid));
      }
    }
    if (fd_.is_open()) wait();
  });
}

}  // namespace ddprun::launcher
