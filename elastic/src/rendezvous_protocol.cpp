#include "ddprun/rendezvous_protocol.hpp"

#include <stdexcept>
#include <string>

namespace ddprun::elastic {

using nlohmann::json;

void to_json(json& j, const WorkerFailure& f) {
  j = json{{"rank", f.rank},           {"local_rank", f.local_rank},
           {"group_rank", f.group_rank}, {"host", f.host},
           {"pid", f.pid},             {"exit_code", f.exit_code},
           {"signal", f.signal},       {"signal_from_outside", f.signal_from_outside},
           {"message", f.message},     {"error_file", f.error_file},
           {"timestamp", f.timestamp}};
}

void from_json(const json& j, WorkerFailure& f) {
  j.at("rank").get_to(f.rank);
  j.at("local_rank").get_to(f.local_rank);
  j.at("group_rank").get_to(f.group_rank);
  j.at("host").get_to(f.host);
  j.at("pid").get_to(f.pid);
  j.at("exit_code").get_to(f.exit_code);
  j.at("signal").get_to(f.signal);
  j.at("signal_from_outside").get_to(f.signal_from_outside);
  j.at("message").get_to(f.message);
  j.at("error_file").get_to(f.error_file);
  j.at("timestamp").get_to(f.timestamp);
}

void to_json(json& j, const RoundAssignment& a) {
  j = json{{"round", a.round},           {"restart_count", a.restart_count},
           {"group_rank", a.group_rank}, {"group_world_size", a.group_world_size},
           {"base_rank", a.base_rank},   {"world_size", a.world_size},
           {"master_addr", a.master_addr}, {"master_port", a.master_port},
           {"run_id", a.run_id}};
}

void from_json(const json& j, RoundAssignment& a) {
  j.at("round").get_to(a.round);
  j.at("restart_count").get_to(a.restart_count);
  j.at("group_rank").get_to(a.group_rank);
  j.at("group_world_size").get_to(a.group_world_size);
  j.at("base_rank").get_to(a.base_rank);
  j.at("world_size").get_to(a.world_size);
  j.at("master_addr").get_to(a.master_addr);
  j.at("master_port").get_to(a.master_port);
  j.at("run_id").get_to(a.run_id);
}

void to_json(json& j, const JobOutcome& o) {
  j = json{{"exit_code", o.exit_code}, {"failures", o.failures}, {"error", o.error}, {"restarts", o.restarts}};
}

void from_json(const json& j, JobOutcome& o) {
  j.at("exit_code").get_to(o.exit_code);
  j.at("failures").get_to(o.failures);
  j.at("error").get_to(o.error);
  j.at("restarts").get_to(o.restarts);
}

void to_json(json& j, const NodeSpec& s) {
  j = json{{"run_id", s.run_id},     {"min_nodes", s.min_nodes}, {"max_nodes", s.max_nodes},
           {"max_restarts", s.max_restarts}, {"node_rank", s.node_rank}, {"nproc", s.nproc},
           {"addr", s.addr},         {"hostname", s.hostname},   {"master_port", s.master_port},
           {"hosts_rendezvous", s.hosts_rendezvous}};
}

void from_json(const json& j, NodeSpec& s) {
  j.at("run_id").get_to(s.run_id);
  j.at("min_nodes").get_to(s.min_nodes);
  j.at("max_nodes").get_to(s.max_nodes);
  j.at("max_restarts").get_to(s.max_restarts);
  j.at("node_rank").get_to(s.node_rank);
  j.at("nproc").get_to(s.nproc);
  j.at("addr").get_to(s.addr);
  j.at("hostname").get_to(s.hostname);
  j.at("master_port").get_to(s.master_port);
  j.at("hosts_rendezvous").get_to(s.hosts_rendezvous);
}

StopReason parse_stop_reason(std::string_view name) {
  for (StopReason r : {StopReason::kWorkerFailed, StopReason::kNodeLost, StopReason::kMembershipChange,
                       StopReason::kShutdown}) {
    if (name == to_string(r)) return r;
  }
  throw std::invalid_argument("unknown stop reason '" + std::string(name) + "'");
}

namespace {
struct WireMessage {
  json operator()(const Assign& m) const { return {{"type", "assign"}, {"assignment", m.assignment}}; }
  json operator()(const Stop& m) const {
    return {{"type", "stop"}, {"round", m.round}, {"reason", to_string(m.reason)}, {"why", m.why}};
  }
  json operator()(const Finish& m) const { return {{"type", "finish"}, {"outcome", m.outcome}}; }
};
}  // namespace

json to_wire(const Message& message) { return std::visit(WireMessage{}, message); }

}  // namespace ddprun::elastic
