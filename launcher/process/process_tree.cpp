#include "process/process_tree.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "ddprun/launch_config.hpp"

namespace ddprun::launcher {
namespace {

// Every live process with its parent, from /proc/PID/stat. One pass over /proc: the
// children files (/proc/PID/task/TID/children) would need one read per thread and are missing
// on kernels without CONFIG_PROC_CHILDREN.
std::vector<std::pair<pid_t, pid_t>> live_processes() {
  std::vector<std::pair<pid_t, pid_t>> out;
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
    if (rest >> state >> ppid && state != 'Z') out.emplace_back(static_cast<pid_t>(pid), static_cast<pid_t>(ppid));
  }
  ::closedir(proc);
  return out;
}

}  // namespace

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : live_processes()) {
    if (ppid == parent) out.push_back(pid);
  }
  return out;
}

std::vector<pid_t> process_tree(pid_t root) {
  const auto processes = live_processes();
  std::vector<pid_t> tree{root};
  for (size_t next = 0; next < tree.size(); ++next) {
    for (const auto& [pid, ppid] : processes) {
      if (ppid == tree[next]) tree.push_back(pid);
    }
  }
  return tree;
}

bool runs_python(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink(proc + "/exe", ec);
  if (!ec && config::python_interpreter_name(exe.filename().string())) return true;
  std::ifstream maps(proc + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/libpython") != std::string::npos) return true;
  }
  return false;
}

pid_t python_process(pid_t root) {
  for (pid_t pid : process_tree(root)) {
    if (runs_python(pid)) return pid;
  }
  return 0;
}

std::string pid_namespace() {
  char link[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  std::string text(link, n > 0 ? static_cast<size_t>(n) : 0);
  const auto open = text.find('['), close = text.find(']');
  return open != std::string::npos && close > open ? text.substr(open + 1, close - open - 1) : "0";
}

pid_t dead_pid_in_name(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return 0;
  char* end = nullptr;
  errno = 0;
  const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
  if (errno != 0 || pid <= 0 || pid > std::numeric_limits<pid_t>::max() || end == name.c_str() + prefix.size() ||
      (*end != '\0' && *end != '.')) {
    return 0;
  }
  if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) return 0;  // it still runs (or is not ours)
  return static_cast<pid_t>(pid);
}

}  // namespace ddprun::launcher
