#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "snapshots/dying_gasp.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;

TEST_CASE("the dying gasp's console line, as a table") {
  struct Row {
    const char* name;
    GaspReport report;
    std::string line;
  };
  const auto report = [](std::vector<int> ranks, unsigned long long files, unsigned long long bytes,
                         std::optional<double> last, double seconds, GaspEnd end, int still_running,
                         std::string by_signal = "") {
    GaspReport r;
    r.signal = SIGUSR1;
    r.ranks = std::move(ranks);
    r.written = {files, bytes, last};
    r.since = 1000;
    r.seconds = seconds;
    r.grace = 5;
    r.end = end;
    r.still_running = still_running;
    r.by_signal = std::move(by_signal);
    return r;
  };
  const Row rows[] = {
      {"saved and ended on their own", report({0, 2, 3}, 2, 1258291, 1000.8, 1.0, GaspEnd::kWorkersEnded, 0),
       "ddprun: dying gasp: SIGUSR1 to 3 workers; 2 files (1.2 MiB) written in 0.8 s; every worker ended in 1.0 s\n"},
      {"one worker", report({0}, 1, 10, 1000.25, 0.3, GaspEnd::kWorkersEnded, 0),
       "ddprun: dying gasp: SIGUSR1 to 1 worker; 1 file (10 B) written in 0.2 s; the worker ended in 0.3 s\n"},
      {"the grace passed, one still running", report({0, 2}, 1, 2048, 1000.5, 5.0, GaspEnd::kGracePassed, 1),
       "ddprun: dying gasp: SIGUSR1 to 2 workers; 1 file (2.0 KiB) written in 0.5 s within the 5.0 s grace "
       "(--snapshot_grace); 1 still running: stopping\n"},
      {"nothing written within the grace", report({0, 2}, 0, 0, std::nullopt, 5.0, GaspEnd::kGracePassed, 2),
       "ddprun: dying gasp: SIGUSR1 to 2 workers; nothing written within the 5.0 s grace (--snapshot_grace); 2 "
       "still running: stopping\n"},
      {"killed by the signal, nothing written", report({1}, 0, 0, std::nullopt, 0.01, GaspEnd::kWorkersEnded, 0),
       "ddprun: dying gasp: SIGUSR1 to 1 worker; nothing written; the worker ended in 10 ms\n"},
      {"cut short by SIGTERM", report({0}, 0, 0, std::nullopt, 1.2, GaspEnd::kShutdownSignal, 1, "SIGTERM"),
       "ddprun: dying gasp: SIGUSR1 to 1 worker; nothing written; cut short after 1.2 s by SIGTERM to ddprun\n"},
      {"cut short by the job's end", report({0}, 1, 1, 1000.1, 0.5, GaspEnd::kJobFinished, 1),
       "ddprun: dying gasp: SIGUSR1 to 1 worker; 1 file (1 B) written in 0.1 s; cut short after 0.5 s by the job's "
       "end\n"},
      {"in milliseconds, below a tenth of a second", report({0}, 1, 10, 1000.008, 0.0995, GaspEnd::kWorkersEnded, 0),
       "ddprun: dying gasp: SIGUSR1 to 1 worker; 1 file (10 B) written in 8 ms; the worker ended in 0.1 s\n"},
      {"cut short by the fence", report({0}, 0, 0, std::nullopt, 0.5, GaspEnd::kFenced, 1),
       "ddprun: dying gasp: SIGUSR1 to 1 worker; nothing written; cut short after 0.5 s by the rendezvous's fence\n"},
      // No survivor (every worker failed together): there was no one to ask, nothing to say.
      {"no survivor", report({}, 0, 0, std::nullopt, 0, GaspEnd::kWorkersEnded, 0), ""},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    CHECK(gasp_line(row.report) == row.line);
  }
  CHECK(std::string(to_string(GaspEnd::kWorkersEnded)) == "workers_ended");
  CHECK(std::string(to_string(GaspEnd::kGracePassed)) == "grace");
  CHECK(std::string(to_string(GaspEnd::kShutdownSignal)) == "signal");
  CHECK(std::string(to_string(GaspEnd::kJobFinished)) == "job_finished");
  CHECK(std::string(to_string(GaspEnd::kFenced)) == "fenced");
}

namespace {

double changed_at(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  const auto seconds = [](const struct timespec& t) { return static_cast<double>(t.tv_sec) + t.tv_nsec / 1e9; };
  return std::max(seconds(st.st_mtim), seconds(st.st_ctim));
}

double coarse_now() {
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return static_cast<double>(now.tv_sec) + now.tv_nsec / 1e9;
}

}  // namespace

TEST_CASE("what the gasp wrote: regular files changed since the signal, in every sub-folder") {
  namespace fs = std::filesystem;
  const std::string dir = testing::temp_dir();
  const auto write = [&](const std::string& name, std::size_t bytes) {
    std::ofstream(dir + "/" + name) << std::string(bytes, 'x');
  };
  fs::create_directories(dir + "/sub/deeper");
  write("old", 100);
  write("c.tmp", 7);
  // The "signal": once the kernel's clock has passed the stamps of the files written before it
  // (a tick, a few milliseconds).
  const double before = std::max(changed_at(dir + "/old"), changed_at(dir + "/c.tmp"));
  double since = coarse_now();
  while (since <= before) since = coarse_now();
  CHECK(written_since(dir, since).files == 0);

  write("a", 10);
  write("sub/deeper/b", 20);
  fs::create_symlink(dir + "/old", dir + "/link");  // not a regular file: not counted
  // A rename into place changes the file's ctime, not its mtime: the committed file counts.
  fs::rename(dir + "/c.tmp", dir + "/c");
  const FolderWrites w = written_since(dir, since);
  CHECK(w.files == 3);
  CHECK(w.bytes == 10 + 20 + 7);
  REQUIRE(w.last.has_value());
  CHECK(*w.last >= since);
  CHECK(*w.last <= coarse_now());

  const FolderWrites all = written_since(dir, 0);
  CHECK(all.files == 4);
  CHECK(all.bytes == 100 + 10 + 20 + 7);
  CHECK(written_since(dir + "/absent", 0).files == 0);
  CHECK_FALSE(written_since(dir + "/absent", 0).last.has_value());
  fs::remove_all(dir);
}
