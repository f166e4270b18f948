#include "ddprun/local_rendezvous.hpp"

#include <algorithm>
#include <system_error>

#include <asio/post.hpp>
#include <fmt/format.h>

#include "ddprun/exit_codes.hpp"

namespace ddprun::elastic {

LocalRendezvous::LocalRendezvous(asio::io_context& io, LocalRendezvousOptions options)
    : io_(io), options_(std::move(options)) {}

void LocalRendezvous::join(Handlers handlers) {
  handlers_ = std::move(handlers);
  asio::post(io_, [this] { start_round(); });
}

void LocalRendezvous::start_round() {
  if (left_) return;
  ++round_;
  failures_.clear();
  RoundAssignment a;
  a.round = round_;
  a.restart_count = restarts_;
  a.group_rank = 0;
  a.group_world_size = 1;
  a.base_rank = 0;
  a.world_size = options_.nproc;
  a.master_addr = options_.master_addr;
  a.run_id = options_.run_id;
  try {
    port_ = PortReservation();  // a given port is free again once the last round ended
    port_ = PortReservation::reserve(options_.master_addr, options_.master_port);
  } catch (const std::system_error& e) {
    JobOutcome outcome;
    outcome.exit_code = exit_code::kRendezvous;
    outcome.error = options_.master_port != 0
        ? fmt::format("{} (is another job using it? pick another with --master_port)", e.what())
        : e.what();
    outcome.restarts = restarts_;
    handlers_.finish(outcome);
    return;
  }
  a.master_port = port_.port();
  handlers_.start_round(a);
}

void LocalRendezvous::worker_failed(int round, const WorkerFailure& failure) {
  if (round == round_) failures_.push_back(failure);
}

void LocalRendezvous::workers_stopped(int round, const std::vector<WorkerFailure>& failures) {
  if (round != round_ || left_) return;
  failures_.insert(failures_.end(), failures.begin(), failures.end());
  std::stable_sort(failures_.begin(), failures_.end(),
                   [](const WorkerFailure& a, const WorkerFailure& b) { return a.timestamp < b.timestamp; });
  if (restarts_ < options_.max_restarts) {
    ++restarts_;
    asio::post(io_, [this] { start_round(); });
    return;
  }
  JobOutcome outcome;
  outcome.failures = failures_;
  outcome.exit_code = failures_.empty() ? exit_code::kInternal : failures_.front().exit_code;
  outcome.restarts = restarts_;
  asio::post(io_, [this, outcome] { handlers_.finish(outcome); });
}

void LocalRendezvous::workers_succeeded(int round) {
  if (round != round_ || left_) return;
  JobOutcome outcome;
  outcome.restarts = restarts_;
  asio::post(io_, [this, outcome] { handlers_.finish(outcome); });
}

void LocalRendezvous::leave(int) {
  left_ = true;
  port_.release();
}

}  // namespace ddprun::elastic
