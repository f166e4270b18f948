#include "core/node_report.hpp"

#include <stdexcept>
#include <string>

#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic {

NodeReport read_report(const nlohmann::json& message, int nproc) {
  const std::string type = message.at("type");
  if (type == "worker_failed") {
    WorkerFailedReport report{message.at("round").get<int>(), message.at("failure").get<WorkerFailure>()};
    check_failure(report.failure, nproc);
    return report;
  }
  if (type == "workers_stopped") {
    WorkersStoppedReport report{message.at("round").get<int>(),
                                message.at("failures").get<std::vector<WorkerFailure>>()};
    for (const WorkerFailure& failure : report.failures) check_failure(failure, nproc);
    return report;
  }
  if (type == "workers_succeeded") return WorkersSucceededReport{message.at("round").get<int>()};
  if (type == "leave") return LeaveReport{message.at("signal").get<int>()};
  throw std::invalid_argument("unknown message type");
}

ReportedFailures reported_failures(const NodeReport& report) {
  ReportedFailures out;
  if (const auto* failed = std::get_if<WorkerFailedReport>(&report)) {
    out.round = failed->round;
    out.failures.push_back(&failed->failure);
  } else if (const auto* stopped = std::get_if<WorkersStoppedReport>(&report)) {
    out.round = stopped->round;
    for (const WorkerFailure& failure : stopped->failures) out.failures.push_back(&failure);
  }
  return out;
}

}  // namespace ddprun::elastic
