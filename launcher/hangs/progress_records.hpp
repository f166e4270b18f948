// The progress records (ddprun/progress_record.hpp) of one round's workers, read from their
// heartbeat files. The watchdog reads a rank's record at each of its beats, and every rank's at
// a hang; a worker of the C++ library beats at every collective, unthrottled, so a read is one
// pair of preads on a file descriptor held for the round, not an open and a close each time.
#pragma once

#include <string>
#include <vector>

#include "ddprun/progress_record.hpp"
#include "ddprun/unique_fd.hpp"

namespace ddprun::launcher {

class ProgressRecords {
 public:
  // A round's heartbeat files, by local rank. Each file is opened now if it exists, else at the
  // first read that finds it (the watchdog creates the files it watches before this call).
  void start_round(const std::vector<std::string>& heartbeat_files);
  // Closes the files (the round's private folder may go).
  void end_round();

  // What `local_rank`'s worker last wrote: every field unknown when it keeps no record, the file
  // is not there, or the record kept changing while read (read_stable).
  ProgressRecord read(int local_rank);
  // Every rank's, by local rank: one read each.
  std::vector<ProgressRecord> read_all();

 private:
  struct File {
    std::string path;
    UniqueFd fd;  // open from the first time the file was found until the round's end
  };
  std::vector<File> files_;
};

}  // namespace ddprun::launcher
