// The signal channel with real signals: blocked, read from a signalfd, sorted into shutdown,
// forwarded and child exits.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>

#include "process/signal_channel.hpp"
#include "run_until.hpp"

using namespace ddprun::launcher;
using ddprun::launcher::testing::run_until;

TEST_CASE("the signal channel reads blocked signals: shutdown, forwarded, child exits") {
  SignalChannel::block_signals(false);
  asio::io_context io;
  std::vector<int> shutdowns, forwarded;
  int children = 0;
  SignalChannel::Handlers h;
  h.shutdown = [&](int sig) { shutdowns.push_back(sig); };
  h.forward = [&](int sig, pid_t sender) {
    forwarded.push_back(sig);
    CHECK(sender == ::getpid());
  };
  h.child_exited = [&] { ++children; };
  SignalChannel channel(io, h);
  channel.start();
  ::kill(::getpid(), SIGTERM);  // blocked: queued for the signalfd, no handler runs
  ::kill(::getpid(), SIGUSR1);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  run_until(io, [&] { return !shutdowns.empty() && !forwarded.empty() && children > 0; });
  ::waitpid(child, nullptr, 0);
  CHECK(shutdowns == std::vector<int>{SIGTERM});
  CHECK(forwarded == std::vector<int>{SIGUSR1});
  CHECK(children >= 1);
  CHECK(is_shutdown_signal(SIGHUP));
  CHECK_FALSE(is_shutdown_signal(SIGUSR2));
  channel.close();
  ::kill(::getpid(), SIGINT);  // closed: stays pending, unread
  io.poll();
  CHECK(shutdowns.size() == 1);
  sigset_t pending;
  sigpending(&pending);
  CHECK(sigismember(&pending, SIGINT));
  // Take it off the pending set without dying, so the rest of the test binary runs.
  const timespec none{0, 0};
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, SIGINT);
  CHECK(sigtimedwait(&only, nullptr, &none) == SIGINT);
}
