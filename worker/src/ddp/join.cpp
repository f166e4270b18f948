#include "ddprun/join.hpp"

#include <fmt/format.h>

#include <ATen/ops/full.h>

#include <exception>
#include <iostream>
#include <stdexcept>

namespace ddprun {

namespace {

// Sums `value` over all ranks with a one-element all-reduce. The Join's own collectives are
// these, in the same order on every rank: a rank still training contributes 1 to the count
// where a joined rank contributes 0, and the reverse for the termination notice.
int64_t sum_over_ranks(Comm& comm, int64_t value) {
  at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kLong).device(comm.device()));
  comm.start_all_reduce(t, ReduceOp::kSum)->wait();
  return t.cpu().data_ptr<int64_t>()[0];
}

}  // namespace

Join::Join(std::vector<Joinable*> joinables, JoinOptions options)
    : joinables_(std::move(joinables)), options_(options), uncaught_at_start_(std::uncaught_exceptions()) {
  if (joinables_.empty()) throw std::invalid_argument("ddprun::Join needs at least one joinable");
  for (Joinable* j : joinables_) {
    if (j == nullptr) throw std::invalid_argument("ddprun::Join: a joinable is null");
    if (&j->join_comm() != &joinables_.front()->join_comm()) {
      throw std::invalid_argument("ddprun::Join: the joinables use different communicators");
    }
    if (j->join_config_.enable) {
      throw std::invalid_argument("ddprun::Join: a joinable is already in another Join");
    }
  }
  for (Joinable* j : joinables_) hooks_.push_back(j->join_hook(options_));
  bool first = true;
  for (Joinable* j : joinables_) {
    j->join_config_ = {options_.enable, options_.throw_on_early_termination, first};
    first = false;
  }
}

Join::~Join() {
  if (!finished_ && std::uncaught_exceptions() == uncaught_at_start_) {
    try {
      finish();
    } catch (const std::exception& e) {
      std::cerr << "ddprun::Join: " << e.what()
                << "\n(thrown at the end of the Join's scope, where a destructor cannot throw: "
                   "call Join::finish() to catch it)\n";
      std::terminate();
    }
  }
  release();
}

void Join::release() {
  for (Joinable* j : joinables_) j->join_config_ = {};
}

void Join::finish() {
  if (finished_) return;
  finished_ = true;
  struct Release {
    Join& join;
    ~Release() { join.release(); }
  } release{*this};
  if (!options_.enable) return;

  Comm& comm = joinables_.front()->join_comm();
  bool is_last_joiner = true;
  // Every iteration of this loop matches one notify_join_context() on the ranks still training.
  // As PyTorch, warn once when this rank has shadowed more than 1000 of them: skew that large
  // costs speed.
  constexpr int kWarnSkew = 1000;
  for (int shadowed = 0;; ++shadowed) {
    if (shadowed == kWarnSkew + 1) {
      std::cerr << fmt::format(
          "ddprun::Join: warning: detected uneven input skew of greater than {}: rank {} has at least {} fewer "
          "inputs than other currently-active ranks; this level of skew could lead to performance degradation "
          "during training\n",
          kWarnSkew, comm.rank(), kWarnSkew);
    }
    const int64_t training = sum_over_ranks(comm, 0);
    if (training == 0) break;
    if (options_.throw_on_early_termination) {
      sum_over_ranks(comm, 1);  // the termination notice the training ranks wait for
      throw std::runtime_error(fmt::format(
          "ddprun::Join: rank {} exhausted its inputs while {} rank(s) were still training "
          "(throw_on_early_termination)",
          comm.rank(), training));
    }
    for (auto& hook : hooks_) hook->main_hook();
    is_last_joiner = false;
  }
  for (auto& hook : hooks_) hook->post_hook(is_last_joiner);
}

int Join::notify_join_context(Joinable& joinable) {
  const Joinable::JoinConfig& config = joinable.join_config_;
  if (!config.enable || !config.is_first_joinable) return 0;
  Comm& comm = joinable.join_comm();
  at::Tensor count = at::full({1}, int64_t{1}, at::TensorOptions().dtype(at::kLong).device(comm.device()));
  auto count_op = comm.start_all_reduce(count, ReduceOp::kSum);
  if (config.throw_on_early_termination) {
    const int64_t joined = sum_over_ranks(comm, 0);
    count_op->wait();
    if (joined != 0) {
      throw std::runtime_error(fmt::format(
          "ddprun::Join: rank {} stops: at least one rank exhausted its inputs "
          "(throw_on_early_termination), so every rank throws",
          comm.rank()));
    }
  } else {
    count_op->wait();
  }
  return static_cast<int>(count.cpu().data_ptr<int64_t>()[0]);
}

}  // namespace ddprun
