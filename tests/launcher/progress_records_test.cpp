// Progress records read from real files through the descriptors held for a round.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hangs/progress_records.hpp"
#include "temp_dir.hpp"

using namespace ddprun;
using namespace ddprun::launcher;
using ddprun::launcher::testing::temp_dir;

namespace {

// Rewrites `path`'s record in place, as a worker does through its mapping (same inode).
void write_record(const std::string& path, const ProgressRecord& record) {
  const std::string text = format_progress_record(record);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
  ::close(fd);
}

ProgressRecord record(long long step, long long coll, bool in, const std::string& op) { return {step, coll, in, op}; }

int open_fds() { return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"), {})); }

}  // namespace

TEST_CASE("progress records: each rank's, read again and again through one descriptor a rank") {
  const std::string dir = temp_dir();
  const std::vector<std::string> paths{dir + "/hb0", dir + "/hb1", dir + "/hb2"};
  std::ofstream(paths[0]).flush();  // empty: a worker that keeps no record
  std::ofstream(paths[1]).flush();
  // hb2 does not exist yet
  const int before = open_fds();
  ProgressRecords records;
  records.start_round(paths);
  CHECK(open_fds() == before + 2);
  CHECK(records.read(0) == ProgressRecord{});
  CHECK(records.read(2) == ProgressRecord{});
  CHECK(records.read(3) == ProgressRecord{});
  CHECK(records.read(-1) == ProgressRecord{});

  write_record(paths[1], record(3, 7, true, "all_reduce"));
  CHECK(records.read(1) == record(3, 7, true, "all_reduce"));
  write_record(paths[1], record(4, 8, false, "ddp_backward"));
  CHECK(records.read(1) == record(4, 8, false, "ddp_backward"));  // the same fd sees the rewrite
  CHECK(open_fds() == before + 2);

  std::ofstream(paths[2]).flush();  // the file appears: opened at its first read, then kept
  write_record(paths[2], record(1, 1, true, "barrier"));
  const auto all = records.read_all();
  REQUIRE(all.size() == 3);
  CHECK(all[0] == ProgressRecord{});
  CHECK(all[1] == record(4, 8, false, "ddp_backward"));
  CHECK(all[2] == record(1, 1, true, "barrier"));
  CHECK(open_fds() == before + 3);

  records.end_round();
  CHECK(open_fds() == before);
  CHECK(records.read(1) == ProgressRecord{});
  std::filesystem::remove_all(dir);
}
