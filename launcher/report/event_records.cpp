#include "report/event_records.hpp"

#include <fmt/format.h>

#include "ddprun/failure_text.hpp"
#include "ddprun/system.hpp"
#include "report/result_file.hpp"

namespace ddprun::launcher::records {
namespace {

using nlohmann::json;

json text_or_null(const std::string& text) { return text.empty() ? json() : json(text); }
json step_or_null(long long step) { return step >= 0 ? json(step) : json(); }

}  // namespace

EventRecord started(const config::LaunchConfig& config) {
  return {"started", {{"nproc_per_node", config.nproc_per_node},
                      {"nnodes", fmt::format("{}:{}", config.min_nodes, config.max_nodes)},
                      {"max_restarts", config.max_restarts},
                      {"chaos", config::chaos_text(config.chaos)},
                      {"program", config.program}}};
}

EventRecord chaos_fault(const std::string& kind, int rank, int local_rank, pid_t pid, double due, double at) {
  return {"chaos_fault", {{"kind", kind},
                          {"rank", rank},
                          {"local_rank", local_rank},
                          {"pid", pid},
                          {"due", due},
                          {"at", at},
                          {"injected", true}}};
}

EventRecord round_started(const elastic::RoundAssignment& round) {
  return {"round_started", {{"round", round.round},
                            {"restart_count", round.restart_count},
                            {"group_world_size", round.group_world_size},
                            {"world_size", round.world_size},
                            {"master_addr", round.master_addr},
                            {"master_port", round.master_port}}};
}

EventRecord restart(const elastic::RoundAssignment& round, int max_restarts) {
  return {"restart", {{"restart_count", round.restart_count},
                      {"max_restarts", max_restarts},
                      {"decision", "restart"},
                      {"reason", elastic::describe_restart(round.restart_reason)},
                      {"backoff", round.backoff}}};
}

EventRecord restart_stopped(const std::string& stop_reason, int restarts) {
  return {"restart", {{"decision", "stop"}, {"reason", stop_reason}, {"restart_count", restarts}}};
}

EventRecord stop_requested(int round, const std::string& why) {
  return {"stop_requested", {{"round", round}, {"why", why}}};
}

EventRecord worker_started(int rank, int local_rank, pid_t pid, double forked, bool warm) {
  EventRecord record{"worker_started", {{"rank", rank}, {"local_rank", local_rank}, {"pid", pid}}};
  if (forked > 0) record.fields["forked"] = forked;
  if (warm) record.fields["warm"] = true;
  return record;
}

EventRecord progress(int rank, int local_rank, std::optional<long long> step, long long beats) {
  return {"progress", {{"rank", rank}, {"local_rank", local_rank}, {"step", step ? json(*step) : json()}, {"beats", beats}}};
}

EventRecord worker_exited(int rank, int local_rank, pid_t pid, int exit_code, int signal, bool stopped_by_ddprun) {
  return {"worker_exited", {{"rank", rank},
                            {"local_rank", local_rank},
                            {"pid", pid},
                            {"exit_code", exit_code},
                            {"signal", signal != 0 ? json(signal_name(signal)) : json()},
                            {"stopped_by_ddprun", stopped_by_ddprun}}};
}

EventRecord worker_failed(const elastic::WorkerFailure& f) {
  return {"worker_failed", {{"rank", f.rank},
                            {"local_rank", f.local_rank},
                            {"exit_code", f.exit_code},
                            {"kind", f.kind.name()},
                            {"retryable", f.retryable},
                            {"cause", f.cause},
                            {"exception", text_or_null(f.exception)},
                            {"location", text_or_null(f.location)},
                            {"step", step_or_null(f.step)},
                            {"progressed", f.progressed}}};
}

EventRecord round_ended(int round) { return {"round_ended", {{"round", round}}}; }

EventRecord snapshots_removed(int round, const std::vector<std::pair<std::string, std::string>>& files) {
  json list = json::array();
  for (const auto& [path, why] : files) list.push_back({{"path", path}, {"why", why}});
  return {"snapshots_removed", {{"round", round}, {"files", list}}};
}

EventRecord spare(int place, const std::string& why) { return {"spare", {{"place", place}, {"why", why}}}; }

EventRecord quarantined(const elastic::QuarantinedNode& node) {
  return {"quarantined", {{"node", node.node}, {"why", node.why}}};
}

EventRecord health_check(const HealthCheckReport& report) { return {"health_check", health_check_json(report)}; }

EventRecord signal_received(int signal) { return {"signal_received", {{"signal", signal_name(signal)}}}; }

EventRecord signal_forwarded(int signal, bool forwarded) {
  return {"signal_received", {{"signal", signal_name(signal)}, {"forwarded", forwarded}}};
}

EventRecord quiet(int rank, int local_rank, double silent_for, std::optional<long long> last_step) {
  return {"quiet", {{"rank", rank},
                    {"local_rank", local_rank},
                    {"silent_for", silent_for},
                    {"last_step", last_step ? json(*last_step) : json()}}};
}

EventRecord hang_timeout_learned(double timeout) { return {"hang_timeout_learned", {{"hang_timeout", timeout}}}; }

EventRecord hang(int rank, int local_rank, pid_t pid, double silent_for, double hang_timeout,
                 std::optional<long long> last_step, const std::string& why) {
  return {"hang", {{"rank", rank},
                   {"local_rank", local_rank},
                   {"pid", pid},
                   {"silent_for", silent_for},
                   {"hang_timeout", hang_timeout},
                   {"last_step", last_step ? json(*last_step) : json()},
                   {"why", why}}};
}

EventRecord timer_expired(pid_t pid, const std::string& scope_id, int signal) {
  return {"timer_expired", {{"pid", pid}, {"scope_id", scope_id}, {"signal", signal}}};
}

EventRecord stacks_written(int rank, pid_t pid, const std::string& file) {
  return {"stacks_written", {{"rank", rank}, {"pid", pid}, {"file", text_or_null(file)}}};
}

EventRecord heartbeats_missing(double after) { return {"heartbeats_missing", {{"after", after}}}; }

EventRecord dying_gasp(int signal, const std::vector<int>& ranks, unsigned long long files, unsigned long long bytes,
                       std::optional<double> last_write, double seconds, const std::string& ended, int still_running) {
  return {"dying_gasp", {{"signal", signal_name(signal)},
                         {"ranks", ranks},
                         {"files", files},
                         {"bytes", bytes},
                         {"last_write", last_write ? json(*last_write) : json()},
                         {"seconds", seconds},
                         {"ended", ended},
                         {"still_running", still_running}}};
}

EventRecord snapshot_restore(int round, std::size_t fetched, std::size_t removed, std::uint64_t bytes, double seconds,
                             const std::vector<std::string>& lines) {
  return {"snapshot_restore", {{"round", round},
                               {"fetched", fetched},
                               {"removed", removed},
                               {"bytes", bytes},
                               {"seconds", seconds},
                               {"lines", lines}}};
}

EventRecord exit(const elastic::JobOutcome& outcome, int exit_code, int shutdown_signal,
                 const std::string& snapshot_dir) {
  json fields = {{"exit_code", exit_code}};
  if (!snapshot_dir.empty()) fields["snapshot_dir"] = snapshot_dir;
  if (shutdown_signal != 0) fields["signal"] = signal_name(shutdown_signal);
  if (!outcome.failures.empty()) {
    const auto& root = outcome.failures.front();
    fields["root_cause"] = {{"rank", root.rank},           {"host", root.host},
                            {"exit_code", root.exit_code}, {"hung", root.hung},
                            {"kind", root.kind.name()},    {"retryable", root.retryable},
                            {"cause", root.cause},         {"step", step_or_null(root.step)}};
  }
  if (!outcome.stop_reason.empty()) fields["stop_reason"] = outcome.stop_reason;
  if (!outcome.error.empty()) fields["error"] = outcome.error;
  if (!outcome.quarantined.empty()) {
    fields["quarantined"] = json::array();
    for (const auto& q : outcome.quarantined) fields["quarantined"].push_back({{"node", q.node}, {"why", q.why}});
  }
  return {"exit", std::move(fields)};
}

}  // namespace ddprun::launcher::records
