#include "core/coordinator_host.hpp"

#include <optional>

#include "ddprun/system.hpp"

namespace ddprun::elastic {

CoordinatorHost::CoordinatorHost(asio::io_context& io, JobSettings settings, CoordinatorTransport& transport,
                                 Deadlines deadlines)
    : coordinator_(std::move(settings), monotonic_seconds()),
      transport_(transport),
      deadlines_(deadlines),
      timer_(io),
      membership_seen_(coordinator_.membership_version()) {
  wait_for_next_deadline();
}

void CoordinatorHost::join(NodeId node, const NodeSpec& spec, Joiner joiner) {
  act(coordinator_.join(node, spec, joiner, monotonic_seconds()));
}

void CoordinatorHost::receive(NodeId node, const NodeReport& report) {
  const double now = monotonic_seconds();
  if (const auto* failed = std::get_if<WorkerFailedReport>(&report)) {
    act(coordinator_.worker_failed(node, failed->round, failed->failure, now));
  } else if (const auto* stopped = std::get_if<WorkersStoppedReport>(&report)) {
    act(coordinator_.workers_stopped(node, stopped->round, stopped->failures, now));
  } else if (const auto* succeeded = std::get_if<WorkersSucceededReport>(&report)) {
    act(coordinator_.workers_succeeded(node, succeeded->round, now));
  } else if (const auto& leave = std::get<LeaveReport>(report); !leave.quarantined.empty()) {
    act(coordinator_.node_quarantined(node, leave.quarantined, now));
  } else {
    act(coordinator_.node_gone(node, "it left after " + signal_name(leave.signal), now));
  }
}

void CoordinatorHost::node_gone(NodeId node, const std::string& why) {
  act(coordinator_.node_gone(node, why, monotonic_seconds()));
}

void CoordinatorHost::halt() {
  halted_ = true;
  timer_.cancel();
}

void CoordinatorHost::act(const Messages& messages) {
  if (coordinator_.membership_version() != membership_seen_) {
    membership_seen_ = coordinator_.membership_version();
    transport_.membership_changed(coordinator_.membership());
  }
  const auto alive = lifetime_.token();
  transport_.deliver(messages);
  if (!alive.expired()) wait_for_next_deadline();
}

void CoordinatorHost::wait_for_next_deadline() {
  const std::optional<double> deadline =
      deadlines_ == Deadlines::kAll ? coordinator_.next_deadline() : coordinator_.restart_at();
  if (!deadline || halted_) {
    timer_.cancel();
    return;
  }
  timer_.expires_at(monotonic_time_point(*deadline));
  timer_.async_wait([this, alive = lifetime_.token()](const asio::error_code& ec) {
    if (ec || alive.expired() || halted_) return;
    act(coordinator_.tick(monotonic_seconds()));
  });
}

}  // namespace ddprun::elastic
