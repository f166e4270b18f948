#include "output/event_log.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "ddprun/clocks.hpp"
#include "ddprun/user_error.hpp"
#include "output/output_writer.hpp"

namespace ddprun::launcher {

EventLog::EventLog(const std::string& path, std::string node)
    : file_(std::make_shared<UniqueFd>(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644))),
      node_(std::move(node)) {
  if (!*file_) {
    throw UserError(fmt::format("--event_log={}: {}: expected a file ddprun can append to", path, std::strerror(errno)));
  }
}

void EventLog::write(std::string_view event, nlohmann::json fields) {
  if (!file_) return;
  nlohmann::json line = {
      {"time", wall_seconds()},
      {"event", event},
      {"node", node_},
      {"group_rank", group_rank_},
      {"attempt", attempt_},
  };
  if (fields.is_object()) line.update(fields);
  // One write() a line (the writer writes each queued line whole), with O_APPEND: lines of
  // several ddprun processes sharing the file (nodes on one host) never interleave. Invalid UTF-8 from a worker is replaced, not thrown.
  write_output(file_->get(), line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", file_);
}

}  // namespace ddprun::launcher
