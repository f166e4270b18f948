#include "ddprun/heartbeat.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "ddprun/progress_record.hpp"
#include "ddprun/worker_env.hpp"
#include "run/progress.hpp"

namespace ddprun {
namespace {

// DDPRUN_HEARTBEAT_FILE, read once: the launcher sets it before the worker starts and never
// changes it. "" without ddprun (or with an older one).
const std::string& heartbeat_path() {
  static const std::string path = [] {
    const char* value = std::getenv(env::kHeartbeatFile);
    return value != nullptr ? std::string(value) : std::string();
  }();
  return path;
}

// The progress record (ddprun/progress_record.hpp) of this process, kept in the heartbeat file
// through a shared mapping: updating it is a memcpy, and wakes nobody; ddprun reads it at each
// beat and when it finds a hang.
class Progress {
 public:
  static Progress& instance() {
    static Progress progress;
    return progress;
  }

  void step() {
    std::lock_guard<std::mutex> lock(mutex_);
    record_.step = record_.step.value_or(0) + 1;
    write();
  }

  bool enter(const char* name) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (record_.in_collective.value_or(false)) return false;  // inside another: the outer one counts
    record_.collectives = record_.collectives.value_or(0) + 1;
    record_.in_collective = true;
    record_.collective = name;
    write();
    return true;
  }

  void leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    record_.in_collective = false;
    write();
  }

 private:
  // Called with mutex_ held. The file is sized and mapped at the first step or collective, not
  // at start-up: sizing it is a write, which ddprun counts as a beat, and starting is not progress.
  void write() {
    if (map_ == nullptr && !opened_) open();
    if (map_ == nullptr || pid_ != ::getpid()) return;  // a fork()ed child shares the mapping, not the record
    const std::string text = format_progress_record(record_);
    if (!text.empty()) std::memcpy(map_, text.data(), text.size());
  }

  void open() {
    opened_ = true;
    if (heartbeat_path().empty()) return;
    const int fd = ::open(heartbeat_path().c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    if (::ftruncate(fd, kProgressRecordBytes) == 0) {
      void* map = ::mmap(nullptr, kProgressRecordBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        map_ = map;
        pid_ = ::getpid();
      }
    }
    ::close(fd);
  }

  std::mutex mutex_;
  ProgressRecord record_;
  void* map_ = nullptr;  // never unmapped: the process's last word stays readable until it exits
  pid_t pid_ = -1;
  bool opened_ = false;
};

}  // namespace

void heartbeat() noexcept {
  if (!heartbeat_path().empty()) ::utimensat(AT_FDCWD, heartbeat_path().c_str(), nullptr, 0);
}

void step() noexcept {
  if (heartbeat_path().empty()) return;
  Progress::instance().step();
  heartbeat();
}

namespace detail {

CollectiveProgress::CollectiveProgress(const char* name) noexcept {
  heartbeat();
  counted_ = !heartbeat_path().empty() && Progress::instance().enter(name);
}

CollectiveProgress::~CollectiveProgress() {
  if (counted_) Progress::instance().leave();
}

}  // namespace detail
}  // namespace ddprun
