#include "report/report_command.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "ddprun/input_limits.hpp"
#include "ddprun/user_error.hpp"
#include "report/job_model.hpp"
#include "report/job_page.hpp"

namespace ddprun::launcher {
namespace {

constexpr const char* kUsage = "usage: ddprun report EVENT_LOG [-o FILE.html | -o -]";

config::UsageError bad(const std::string& what) {
  return config::UsageError(fmt::format("report: {}; {}", what, kUsage));
}

// Written beside `path` and renamed over it: a reader never sees half a page.
void write_page(const std::string& path, const std::string& page) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    file << page;
    file.flush();
    if (!file) {
      const int error = errno;
      std::remove(temp.c_str());
      throw UserError(fmt::format("report -o {}: cannot write it: {}", shown(path), std::strerror(error)));
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temp.c_str());
    throw UserError(fmt::format("report -o {}: cannot write it: {}", shown(path), std::strerror(error)));
  }
}

}  // namespace

std::string default_report_path(const std::string& log) {
  const auto slash = log.rfind('/');
  const auto dot = log.rfind('.');
  const bool has_extension = dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1);
  return (has_extension ? log.substr(0, dot) : log) + ".html";
}

int report_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string log, output;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-o" || a == "--output") {
      if (i + 1 >= args.size()) throw bad(a + " needs a file");
      output = args[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      output = a.substr(9);
    } else if (a == "-h" || a == "--help") {
      out << kUsage
          << "\nWrites one self-contained HTML page of the job of an --event_log: its timeline, each "
             "rank's progress, its goodput.\n";
      return 0;
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      throw bad(fmt::format("unknown option {}", shown(a)));
    } else if (log.empty()) {
      log = a;
    } else {
      throw bad(fmt::format("one event log at a time, not also {}", shown(a)));
    }
  }
  if (log.empty()) throw bad("no event log given");
  if (output.empty()) output = default_report_path(log);
  if (output == log) throw bad(fmt::format("-o {} is the event log itself", shown(output)));
  std::ifstream file(log, std::ios::binary);
  if (!file) throw UserError(fmt::format("report {}: cannot read it: {}", shown(log), std::strerror(errno)));
  const JobModel job = read_job(file, log);
  const std::string page = job_page(job, log);
  if (output == "-") {
    out << page << std::flush;
  } else {
    write_page(output, page);
    err << fmt::format("ddprun: report of {} ({} records, {} rounds, {} failures) in {}\n", log, job.records,
                       job.round_count(), job.failures.size(), output);
  }
  return 0;
}

}  // namespace ddprun::launcher
