// read_report() as a table: each report read from its wire message, and each way a peer's
// message is refused, with the words that say why (the TCP host closes the connection with
// them, the etcd leader ignores the report and says them).
#include "core/node_report.hpp"

#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "core/rendezvous_protocol.hpp"

namespace ddprun::elastic {
namespace {

using Json = nlohmann::json;

// A failure of local rank 1 of a node with 2 workers, in range.
WorkerFailure failure() {
  WorkerFailure f;
  f.rank = 3;
  f.local_rank = 1;
  f.group_rank = 1;
  f.host = "h1";
  f.exit_code = 1;
  f.kind = FailureKind::kHostOom;
  return f;
}

TEST_CASE("read_report reads each report") {
  const Json failed = {{"type", "worker_failed"}, {"round", 4}, {"failure", failure()}};
  const NodeReport report = read_report(failed, 2);
  const auto* f = std::get_if<WorkerFailedReport>(&report);
  REQUIRE(f);
  CHECK(f->round == 4);
  CHECK(Json(f->failure) == Json(failure()));

  const Json stopped = {{"type", "workers_stopped"}, {"round", 5}, {"failures", {failure(), failure()}}};
  const NodeReport s = read_report(stopped, 2);
  REQUIRE(std::holds_alternative<WorkersStoppedReport>(s));
  CHECK(std::get<WorkersStoppedReport>(s).failures.size() == 2);
  const ReportedFailures reported = reported_failures(s);
  CHECK(reported.round == 5);
  CHECK(reported.failures.size() == 2);

  const NodeReport ok = read_report({{"type", "workers_succeeded"}, {"round", 6}}, 2);
  CHECK(std::get<WorkersSucceededReport>(ok).round == 6);
  CHECK(reported_failures(ok).failures.empty());

  const NodeReport leave = read_report({{"type", "leave"}, {"signal", 15}}, 2);
  CHECK(std::get<LeaveReport>(leave).signal == 15);
  CHECK(std::get<LeaveReport>(leave).quarantined.empty());
  CHECK(reported_failures(leave).failures.empty());
  CHECK(std::get<LeaveReport>(read_report(leave_message(15, ""), 2)).signal == 15);

  // A node whose health check found it unfit leaves as quarantined, saying why.
  const NodeReport unfit = read_report(leave_message(0, "its health check exited 1"), 2);
  CHECK(std::get<LeaveReport>(unfit).signal == 0);
  CHECK(std::get<LeaveReport>(unfit).quarantined == "its health check exited 1");
  CHECK_THROWS(read_report({{"type", "leave"}, {"signal", 0}, {"quarantined", std::string(3000, 'x')}}, 2));
}

TEST_CASE("read_report refuses what is not a report in range") {
  struct Case {
    std::string name;
    Json message;
    std::string refusal;  // a part of what() that names the fault
  };
  const auto failed_with = [](const std::function<void(WorkerFailure&)>& change) {
    WorkerFailure f = failure();
    change(f);
    return Json{{"type", "worker_failed"}, {"round", 1}, {"failure", f}};
  };
  const std::vector<Case> cases = {
      {"a type that is not a report's", {{"type", "assign"}, {"round", 1}}, "unknown message type"},
      {"a join after joining", {{"type", "join"}}, "unknown message type"},
      {"no round", {{"type", "workers_succeeded"}}, "round"},
      {"a round that is text", {{"type", "workers_succeeded"}, {"round", "1"}}, "number"},
      {"no failure", {{"type", "worker_failed"}, {"round", 1}}, "failure"},
      {"failures that are not a list", {{"type", "workers_stopped"}, {"round", 1}, {"failures", 3}}, "array"},
      {"a leave without its signal", {{"type", "leave"}}, "signal"},
      {"exit code 0", failed_with([](WorkerFailure& f) { f.exit_code = 0; }), "exit code"},
      {"exit code 256", failed_with([](WorkerFailure& f) { f.exit_code = 256; }), "exit code"},
      {"a local rank beyond nproc", failed_with([](WorkerFailure& f) { f.local_rank = 2; }), "local rank"},
      {"a stopped worker out of range",
       {{"type", "workers_stopped"},
        {"round", 1},
        {"failures", {failure(), [] {
                        WorkerFailure f = failure();
                        f.signal = 65;
                        return Json(f);
                      }()}}},
       "signal"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    try {
      read_report(c.message, 2);
      FAIL("accepted");
    } catch (const std::exception& e) {
      CHECK(std::string(e.what()).find(c.refusal) != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace ddprun::elastic
