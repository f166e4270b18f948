// What a node reports to the job's coordinator (rendezvous_protocol.hpp's worker_failed,
// workers_stopped, workers_succeeded and leave), read from its wire message once, for every
// transport that carries reports from another process (the TCP host, the etcd leader), and
// what CoordinatorHost::receive takes from all three hosts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "ddprun/rendezvous.hpp"

namespace ddprun::elastic {

struct WorkerFailedReport {
  int round;
  WorkerFailure failure;
};
struct WorkersStoppedReport {
  int round;
  std::vector<WorkerFailure> failures;
};
struct WorkersSucceededReport {
  int round;
};
// The node's launcher is leaving the job on `signal`, or (signal 0, `quarantined` set) because
// its own health check found the node unfit.
struct LeaveReport {
  int signal;
  std::string quarantined;
};
using NodeReport = std::variant<WorkerFailedReport, WorkersStoppedReport, WorkersSucceededReport, LeaveReport>;

// A message of a node with `nproc` workers, as a report. Throws std::exception naming what is
// wrong: a type that is not a report's ("unknown message type"), a field missing or of the
// wrong type, a failure out of range (check_failure). Whether a failure is one of the node's
// own workers is the transport's to check: only the TCP host knows which ranks it assigned.
NodeReport read_report(const nlohmann::json& message, int nproc);

// The leave message of a launcher stopping on `signal`, or (signal 0) leaving as quarantined for
// `quarantined` (its health check); read_report() reads it back.
nlohmann::json leave_message(int signal, const std::string& quarantined);

// The failures `report` carries, with its round: none for a success or a leave.
struct ReportedFailures {
  int round = 0;
  std::vector<const WorkerFailure*> failures;
};
ReportedFailures reported_failures(const NodeReport& report);

}  // namespace ddprun::elastic
