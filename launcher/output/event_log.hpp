// --event_log=FILE: one JSON object a line for every event of the job, appended, each with
// "time" (seconds since the epoch), "event", "node" (host name), "group_rank" and "attempt"
// (this node's start of its workers, 0 before the first), plus the event's own fields.
// The event names are public API (docs/reference/event-log.md, which tests/docs/reference_test.py
// checks against the names written).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

// One line of the log: the event's name and its own fields (report/event_records.hpp makes them).
struct EventRecord {
  std::string_view event;
  nlohmann::json fields;  // an object
};

class EventLog {
 public:
  EventLog() = default;  // writes nothing
  // Opens `path` for appending. Throws ddprun::UserError, naming --event_log, when it cannot.
  EventLog(const std::string& path, std::string node);

  bool enabled() const { return file_ != nullptr; }
  void set_round(int group_rank, int attempt) {
    group_rank_ = group_rank;
    attempt_ = attempt;
  }
  // Writes one line; `fields` is a JSON object (or null).
  void write(std::string_view event, nlohmann::json fields = nullptr);
  void write(EventRecord record) { write(record.event, std::move(record.fields)); }

 private:
  std::shared_ptr<UniqueFd> file_;  // shared with the output writer until written
  std::string node_;
  int group_rank_ = -1;
  int attempt_ = 0;
};

}  // namespace ddprun::launcher
