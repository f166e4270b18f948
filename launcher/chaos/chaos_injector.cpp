#include "chaos/chaos_injector.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "ddprun/clocks.hpp"

namespace ddprun::launcher {

ChaosInjector::ChaosInjector(asio::io_context& io, const config::ChaosSpec& spec, int nproc, double start,
                             Hooks hooks)
    : timer_(io), spec_(spec), nproc_(nproc), start_(start), hooks_(std::move(hooks)) {}

void ChaosInjector::workers_started(int group_rank, bool hosts_rendezvous) {
  hit_ = false;
  stopped_ = 0;
  group_rank_ = group_rank;
  keeps_node_ = group_rank == 0 || hosts_rendezvous;
  if (schedule_) return;
  schedule_.emplace(spec_, group_rank, nproc_);
  next_ = schedule_->next();
  arm();
}

void ChaosInjector::arm() {
  const double in = next_.due + start_ - monotonic_seconds();
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(in > 0 ? in : 0)));
  timer_.async_wait([this](std::error_code ec) {
    if (!ec) due();
  });
}

void ChaosInjector::due() {
  waiting_ = true;
  if (!hit_ && hooks_.training()) inject();
}

void ChaosInjector::training_started() {
  if (waiting_ && !hit_) inject();
}

void ChaosInjector::inject() {
  ChaosKind kind = next_.kind;
  if (kind == ChaosKind::kNode && keeps_node_) kind = ChaosKind::kKill;
  const pid_t pid = hooks_.worker(next_.local_rank);
  if (pid <= 0) return;  // the worker is gone already: a failure is on its way; wait for the next round
  waiting_ = false;
  hit_ = true;
  const double at = monotonic_seconds() - start_;
  hooks_.injected(next_, kind, kind == ChaosKind::kNode ? 0 : pid, at);
  switch (kind) {
    case ChaosKind::kKill: ::kill(pid, SIGKILL); break;
    case ChaosKind::kHang:
      stopped_ = pid;
      ::kill(pid, SIGSTOP);
      break;
    case ChaosKind::kNode:
      for (int r = 0; r < nproc_; ++r) {
        if (const pid_t w = hooks_.worker(r); w > 0) ::kill(-w, SIGKILL);
      }
      ::kill(::getpid(), SIGKILL);
      break;
  }
  next_ = schedule_->next();
  arm();
}

void ChaosInjector::release() {
  if (stopped_ > 0) ::kill(stopped_, SIGCONT);
  stopped_ = 0;
}

}  // namespace ddprun::launcher
