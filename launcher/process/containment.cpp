#include "process/containment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/system.hpp"
#include "ddprun/worker_env.hpp"
#include "process/process_tree.hpp"

namespace ddprun::launcher {
namespace {

// The mount point of the cgroup v2 hierarchy, from /proc/self/mountinfo ("" if none).
std::string cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ... mount_point ... - fstype source options
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string fstype;
    after >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, devices, root, mount_point;
    fields >> id >> parent >> devices >> root >> mount_point;
    return mount_point;
  }
  return "";
}

// ddprun's own cgroup v2 path ("0::/path" in /proc/self/cgroup).
std::string own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

std::vector<pid_t> read_pids(const std::string& file) {
  std::vector<pid_t> pids;
  std::ifstream in(file);
  pid_t pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

// Calls `visit` with every cgroup below `path`, deepest first, then with `path` itself.
void for_each_cgroup(const std::string& path, const std::function<void(const std::string&)>& visit) {
  if (DIR* dir = ::opendir(path.c_str())) {
    std::vector<std::string> below;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_type == DT_DIR && std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) {
        below.push_back(path + "/" + entry->d_name);
      }
    }
    ::closedir(dir);
    for (const auto& cgroup : below) for_each_cgroup(cgroup, visit);
  }
  visit(path);
}

// Whether cgroup.events (open as `events`) says "populated 1"; true when it cannot be read.
bool populated(int events) {
  char text[256];
  const ssize_t n = ::pread(events, text, sizeof text - 1, 0);
  if (n <= 0) return true;
  text[n] = '\0';
  const char* key = std::strstr(text, "populated ");
  return key == nullptr || key[std::strlen("populated ")] != '0';
}

// Waits until no process is left in the cgroup at `path`, or `timeout` passes. cgroup.events
// is pollable (POLLPRI when "populated" changes), so this wakes up when the last one leaves
// rather than at the next tick of a timer.
bool wait_empty(const std::string& path, std::chrono::milliseconds timeout) {
  const UniqueFd events(::open((path + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
  if (!events) return read_pids(path + "/cgroup.procs").empty();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (populated(events.get())) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{events.get(), POLLPRI, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
  }
  return true;
}

}  // namespace

std::string Containment::planned_path(const std::map<std::string, std::string>& environ) {
  if (const auto it = environ.find(env::kCgroup); it != environ.end() && it->second == "0") return "";
  const std::string mount = cgroup2_mount();
  const std::string own = own_cgroup();
  if (mount.empty() || own.empty()) return "";
  // Under ddprun's own cgroup: the workers stay inside whatever limits ddprun has (a SLURM
  // step's, a container's). Its own cgroup holds a process (ddprun), so it has no controllers
  // of its own for children, which is all a cgroup needs to be created and killed.
  // The PID namespace in the name: a pid means something only in its own, and ddprun processes
  // in containers may share this cgroup (remove_stale()).
  return mount + (own == "/" ? "" : own) + "/ddprun." + pid_namespace() + "." + std::to_string(::getpid());
}

void Containment::remove_stale(const std::string& planned) {
  const std::string parent = planned.substr(0, planned.rfind('/'));
  const std::string prefix = "ddprun." + pid_namespace() + ".";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path() == planned || dead_pid_in_name(name, prefix) == 0) continue;
    remove_cgroup(entry.path().string());
  }
}

std::unique_ptr<Containment> Containment::create(const std::string& path) {
  std::unique_ptr<Containment> c(new Containment());
  if (path.empty()) {
    c->why_not_ = "no cgroup v2 hierarchy, or DDPRUN_CGROUP=0";
    return c;
  }
  const std::string parent = path.substr(0, path.rfind('/'));
  // One left by an earlier ddprun of the same pid that was killed before its guard existed:
  // empty (its processes died with their parents' deaths) or not, it is stale.
  if (::mkdir(path.c_str(), 0755) != 0 && errno == EEXIST) remove_cgroup(path);
  if (::access(path.c_str(), F_OK) != 0 && ::mkdir(path.c_str(), 0755) != 0) {
    c->why_not_ = "cannot create a cgroup in " + parent + ": " + std::strerror(errno);
    return c;
  }
  c->procs_.reset(::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!c->procs_) {
    c->why_not_ = "cannot open " + path + "/cgroup.procs: " + std::strerror(errno);
    ::rmdir(path.c_str());
    return c;
  }
  c->path_ = path;
  // Best effort: the memory controller for the rounds' cgroups, so that an out-of-memory kill
  // is a counted fact (memory_events()) rather than a guess from SIGKILL.
  if (const auto controllers = read_file(path + "/cgroup.controllers");
      controllers && controllers->find("memory") != std::string::npos) {
    const int fd = ::open((path + "/cgroup.subtree_control").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      [[maybe_unused]] const ssize_t ignored = ::write(fd, "+memory", 7);
      ::close(fd);
    }
  }
  return c;
}

std::optional<long long> parse_vmstat_oom_kills(std::string_view vmstat) {
  std::size_t at = 0;
  while (at < vmstat.size()) {
    std::size_t end = vmstat.find('\n', at);
    if (end == std::string_view::npos) end = vmstat.size();
    const std::string_view line = vmstat.substr(at, end - at);
    constexpr std::string_view kKey = "oom_kill ";
    if (line.substr(0, kKey.size()) == kKey) {
      const std::string value(line.substr(kKey.size()));
      char* stop = nullptr;
      const long long n = std::strtoll(value.c_str(), &stop, 10);
      if (stop == value.c_str()) return std::nullopt;
      return n;
    }
    at = end + 1;
  }
  return std::nullopt;
}

std::optional<long long> kernel_oom_kills() {
  const auto vmstat = read_file("/proc/vmstat");
  return vmstat ? parse_vmstat_oom_kills(*vmstat) : std::nullopt;
}

std::optional<Containment::MemoryEvents> Containment::memory_events() const {
  if (path_.empty()) return std::nullopt;
  const std::string top = path_.substr(0, path_.rfind('/'));  // ddprun's own cgroup
  for (std::string at = round_path_.empty() ? path_ : round_path_; at.size() >= top.size();
       at = at.substr(0, at.rfind('/'))) {
    const auto events = read_file(at + "/memory.events");
    if (!events) continue;
    MemoryEvents m;
    const std::size_t key = events->find("oom_kill ");
    if (key != std::string::npos) m.oom_kills = std::atoll(events->c_str() + key + std::strlen("oom_kill "));
    if (const auto peak = read_file(at + "/memory.peak"); peak && !peak->empty()) m.peak = std::atoll(peak->c_str());
    return m;
  }
  return std::nullopt;
}

void Containment::prepare_round() {
  if (path_.empty() || !round_path_.empty()) return;
  emptied_ = false;
  round_path_ = path_ + "/round." + std::to_string(++rounds_);
  if (::mkdir(round_path_.c_str(), 0755) == 0) {
    round_dir_.reset(::open(round_path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    round_procs_.reset(::open((round_path_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (round_dir_ && round_procs_) return;
  }
  // Out of cgroups (cgroup.max.descendants), say: the workers join ddprun's own cgroup.
  remove_round_cgroup();
}

void Containment::remove_round_cgroup() {
  round_dir_.reset();
  round_procs_.reset();
  if (!round_path_.empty()) remove_tree(round_path_);
  round_path_.clear();
}

void Containment::retire_round_cgroup() {
  round_dir_.reset();
  round_procs_.reset();
  if (!round_path_.empty()) retired_.push_back(round_path_);
  round_path_.clear();
}

void Containment::remove_retired() {
  for (const auto& path : retired_) remove_tree(path);
  retired_.clear();
}

Containment::~Containment() {
  if (path_.empty()) return;
  round_dir_.reset();
  round_procs_.reset();
  procs_.reset();
  // The last round's end killed and waited for everything already: no second cgroup.kill.
  if (emptied_) {
    remove_tree(path_);
  } else {
    remove_cgroup(path_);
  }
}

void Containment::kill_cgroup(const std::string& path) {
  // cgroup.kill (Linux 5.14) kills every process of the cgroup and of the cgroups below it at
  // once, also those forking meanwhile.
  const int fd = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    const bool killed = ::write(fd, "1", 1) == 1;
    ::close(fd);
    if (killed) return;
  }
  for (int pass = 0; pass < 100; ++pass) {
    bool any = false;
    for_each_cgroup(path, [&any](const std::string& cgroup) {
      for (pid_t pid : read_pids(cgroup + "/cgroup.procs")) {
        ::kill(pid, SIGKILL);
        any = true;
      }
    });
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Containment::remove_tree(const std::string& path) {
  bool removed = true;
  // The cgroups below first (a worker may have made some): rmdir fails while a cgroup has any.
  for_each_cgroup(path, [&removed, &path](const std::string& cgroup) {
    if (cgroup == path) return;
    // A killed process leaves the cgroup once it has exited; rmdir fails (EBUSY) until then.
    for (int pass = 0; ::rmdir(cgroup.c_str()) != 0 && errno == EBUSY; ++pass) {
      if (pass == 200) {
        removed = false;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  for (int pass = 0; pass < 200; ++pass) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return removed;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool Containment::remove_cgroup(const std::string& path) {
  kill_cgroup(path);
  wait_empty(path, std::chrono::seconds(2));
  return remove_tree(path);
}

void Containment::kill_all(const std::set<pid_t>& keep) {
  if (!path_.empty()) {
    kill_cgroup(path_);
    // Wait (briefly) until they are gone, so the next round's workers meet none of them.
    emptied_ = wait_empty(path_, std::chrono::seconds(1));
    // A killed cgroup is not reused: clone3 into a cgroup once killed gives a child that is
    // SIGKILLed at birth (Linux 6.18 compares the cgroup's kill count with that of the parent's
    // own cgroup), so each round's workers start in a new one (prepare_round()), and this one
    // goes once they run (remove_retired()).
    retire_round_cgroup();
    return;
  }
  // A re-parented child may have children of its own that reach ddprun only once it is dead:
  // repeat until no child is left.
  for (int pass = 0; pass < 100; ++pass) {
    bool any = false;
    for (pid_t pid : children_of(::getpid())) {
      if (keep.count(pid)) continue;
      ::kill(pid, SIGKILL);
      any = true;
    }
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace ddprun::launcher
