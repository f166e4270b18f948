#include "snapshots/dying_gasp.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "ddprun/system.hpp"
#include "snapshots/snapshot_place.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;

const char* to_string(GaspEnd end) {
  switch (end) {
    case GaspEnd::kWorkersEnded: return "workers_ended";
    case GaspEnd::kGracePassed: return "grace";
    case GaspEnd::kShutdownSignal: return "signal";
    case GaspEnd::kJobFinished: return "job_finished";
    case GaspEnd::kFenced: return "fenced";
  }
  return "?";
}

namespace {

double seconds_of(const struct timespec& t) { return static_cast<double>(t.tv_sec) + t.tv_nsec / 1e9; }

// "0.8 s"; below a tenth, in milliseconds ("8 ms"), which a save into memory often takes.
std::string seconds_words(double seconds) {
  if (seconds < 0.0995) return fmt::format("{:.0f} ms", seconds * 1000);
  return fmt::format("{:.1f} s", seconds);
}

std::string workers_words(std::size_t n) { return fmt::format("{} worker{}", n, n == 1 ? "" : "s"); }

}  // namespace

FolderWrites written_since(const std::string& folder, double since) {
  FolderWrites w;
  std::error_code ec;
  // A file written while the scan runs is counted or not; the scan is at the gasp's end.
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    // A rename into place changes the file's ctime, not its mtime: a checkpoint written before
    // the signal and committed by a rename after it counts as the gasp's.
    const double changed = std::max(seconds_of(st.st_mtim), seconds_of(st.st_ctim));
    if (changed < since) continue;
    ++w.files;
    w.bytes += static_cast<unsigned long long>(st.st_size);
    if (!w.last || changed > *w.last) w.last = changed;
  }
  return w;
}

std::string gasp_line(const GaspReport& r) {
  if (r.ranks.empty()) return "";
  std::string line = fmt::format("ddprun: dying gasp: {} to {}; ", signal_name(r.signal),
                                 workers_words(r.ranks.size()));
  if (r.written.files > 0) {
    const double in = r.written.last ? std::max(0.0, *r.written.last - r.since) : r.seconds;
    line += fmt::format("{} file{} ({}) written in {}", r.written.files, r.written.files == 1 ? "" : "s",
                        size_words(r.written.bytes), seconds_words(in));
  } else {
    line += "nothing written";
  }
  switch (r.end) {
    case GaspEnd::kWorkersEnded:
      line += fmt::format("; {} ended in {}", r.ranks.size() == 1 ? "the worker" : "every worker",
                          seconds_words(r.seconds));
      break;
    case GaspEnd::kGracePassed:
      line += fmt::format(" within the {} grace (--snapshot_grace)", seconds_words(r.grace));
      if (r.still_running > 0) line += fmt::format("; {} still running: stopping", r.still_running);
      break;
    case GaspEnd::kShutdownSignal:
      line += fmt::format("; cut short after {} by {} to ddprun", seconds_words(r.seconds),
                          r.by_signal.empty() ? "a signal" : r.by_signal);
      break;
    case GaspEnd::kJobFinished:
      line += fmt::format("; cut short after {} by the job's end", seconds_words(r.seconds));
      break;
    case GaspEnd::kFenced:
      line += fmt::format("; cut short after {} by the rendezvous's fence", seconds_words(r.seconds));
      break;
  }
  return line + "\n";
}

}  // namespace ddprun::launcher
