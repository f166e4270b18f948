#include "core/node_report.hpp"

#include <stdexcept>
#include <string>

#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic {
namespace {

// A leave's reason is one clause of the node's own ("its health check `...` exited 1").
constexpr std::size_t kMaxLeaveReasonChars = 2000;

}  // namespace

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
  if (type == "leave") {
    LeaveReport report{message.at("signal").get<int>(), message.value("quarantined", std::string())};
    if (report.quarantined.size() > kMaxLeaveReasonChars) throw std::invalid_argument("quarantined: too long");
    return report;
  }
  throw std::invalid_argument("unknown message type");
}

nlohmann::json leave_message(int signal, const std::string& quarantined) {
  nlohmann::json message{{"type", "leave"}, {"signal", signal}};
  if (!quarantined.empty()) message["quarantined"] = quarantined.substr(0, kMaxLeaveReasonChars);
  return message;
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
