// ddprun's signals, read on the event loop: they are blocked in every thread and read from a
// signalfd, so no handler ever runs (tini's and s6's way). SIGCHLD means "reap"; SIGINT, SIGTERM,
// SIGHUP and SIGQUIT stop the job; SIGUSR1 and SIGUSR2 are passed on to the workers.
#pragma once

#include <sys/types.h>

#include <functional>

#include <asio/posix/stream_descriptor.hpp>

namespace ddprun::launcher {

bool is_shutdown_signal(int sig);

class SignalChannel {
 public:
  struct Handlers {
    std::function<void()> child_exited;        // SIGCHLD: one or more children may have ended
    std::function<void(int)> shutdown;         // SIGINT, SIGTERM, SIGHUP, SIGQUIT
    std::function<void(int, pid_t)> forward;   // SIGUSR1/2, with the sender's pid (0 if unknown)
  };

  // Blocks nothing itself: block_signals() must have run before any thread started.
  SignalChannel(asio::io_context& io, Handlers handlers);

  // Blocks the signals the channel reads, in the calling thread and every thread it starts
  // after. `debug`: the worker owns the terminal, so Ctrl-C and Ctrl-\ are ignored, not read.
  static void block_signals(bool debug);

  // Reads signals until close().
  void start();
  void close();

 private:
  void wait();

  asio::posix::stream_descriptor fd_;
  Handlers handlers_;
};

// True when `sender` is SLURM's step daemon, which signals every process of the step itself
// (scancel --signal, sbatch --signal): the workers already have the signal.
bool sent_by_slurmstepd(pid_t sender);

}  // namespace ddprun::launcher
