#include "hangs/progress_records.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace ddprun::launcher {
namespace {

// The file's first kProgressRecordBytes bytes, as many as it has.
std::string read_head(int fd) {
  std::string content(kProgressRecordBytes, '\0');
  ssize_t n;
  do {
    n = ::pread(fd, content.data(), content.size(), 0);
  } while (n < 0 && errno == EINTR);
  content.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return content;
}

}  // namespace

void ProgressRecords::start_round(const std::vector<std::string>& heartbeat_files) {
  files_.clear();
  for (const auto& path : heartbeat_files) {
    files_.push_back({path, UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))});
  }
}

void ProgressRecords::end_round() { files_.clear(); }

ProgressRecord ProgressRecords::read(int local_rank) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= files_.size()) return {};
  File& file = files_[static_cast<size_t>(local_rank)];
  if (!file.fd) file.fd.reset(::open(file.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.fd) return {};
  return read_stable([fd = file.fd.get()] { return read_head(fd); }).value_or(ProgressRecord{});
}

std::vector<ProgressRecord> ProgressRecords::read_all() {
  std::vector<ProgressRecord> records;
  records.reserve(files_.size());
  for (size_t i = 0; i < files_.size(); ++i) records.push_back(read(static_cast<int>(i)));
  return records;
}

}  // namespace ddprun::launcher
