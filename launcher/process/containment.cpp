#include "process/containment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/worker_env.hpp"

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

// The processes whose parent is ddprun.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(entry->d_name) + "/stat");
    std::string text;
    std::getline(stat, text);
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    char state;
    long ppid;
    if (rest >> state >> ppid && ppid == parent && state != 'Z') out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

bool populated(const std::string& path) {
  std::ifstream in(path + "/cgroup.events");
  std::string key;
  int value;
  while (in >> key >> value) {
    if (key == "populated") return value != 0;
  }
  return !read_pids(path + "/cgroup.procs").empty();
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
  return mount + (own == "/" ? "" : own) + "/ddprun." + std::to_string(::getpid());
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
  return c;
}

Containment::~Containment() {
  if (path_.empty()) return;
  procs_.reset();
  remove_cgroup(path_);
}

void Containment::kill_cgroup(const std::string& path) {
  // cgroup.kill (Linux 5.14) kills every process at once, also those forking meanwhile.
  const int fd = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    const bool killed = ::write(fd, "1", 1) == 1;
    ::close(fd);
    if (killed) return;
  }
  for (int pass = 0; pass < 100; ++pass) {
    const auto pids = read_pids(path + "/cgroup.procs");
    if (pids.empty()) return;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Containment::remove_cgroup(const std::string& path) {
  kill_cgroup(path);
  // A killed process leaves the cgroup once it has exited; rmdir fails (EBUSY) until then.
  for (int pass = 0; pass < 200; ++pass) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void Containment::kill_all(const std::set<pid_t>& keep) {
  if (!path_.empty()) {
    kill_cgroup(path_);
    // Wait (briefly) until they are gone, so the next round's workers meet none of them.
    for (int pass = 0; pass < 100 && populated(path_); ++pass) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
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
