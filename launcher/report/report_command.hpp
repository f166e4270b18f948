// `ddprun report EVENT_LOG [-o FILE.html]`: the page of a job (job_page.hpp) from its
// --event_log (job_model.hpp), written to FILE.html (default: EVENT_LOG with its extension
// replaced by .html; `-o -`: standard output). It starts nothing and reads nothing else: the log
// may be of a job that still runs. Taken as this command only as ddprun's first argument, as
// `ddprun status` is.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace ddprun::launcher {

inline constexpr const char* kReportCommand = "report";

// The page's default file: `log` with its last extension (in its file name) replaced by .html.
std::string default_report_path(const std::string& log);

// `args`: what follows `report`. Returns 0 once the page is written (its path said on `err`);
// throws ddprun::UserError (exit 64) for bad arguments, an unreadable, empty or foreign log and
// an output that cannot be written, each one line.
int report_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ddprun::launcher
