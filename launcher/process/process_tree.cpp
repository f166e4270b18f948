#include "process/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>

#include "ddprun/launch_config.hpp"

namespace ddprun::launcher {
namespace {

// The live (not zombie) processes, each with its parent.
std::vector<std::pair<pid_t, pid_t>> live_processes() {
  std::vector<std::pair<pid_t, pid_t>> out;
  for (const ProcStat& p : all_proc_stats()) {
    if (p.state != 'Z') out.emplace_back(p.pid, p.parent);
  }
  return out;
}

// The number at the start of `text`, which it skips, and the blanks after it; nullopt if none.
std::optional<unsigned long long> next_number(std::string_view& text) {
  unsigned long long value = 0;
  std::size_t used = 0;
  const bool negative = !text.empty() && text[0] == '-';  // a process with no controlling tty: tty_pgrp -1
  for (used = negative; used < text.size() && text[used] >= '0' && text[used] <= '9'; ++used) {
    value = value * 10 + static_cast<unsigned long long>(text[used] - '0');
  }
  if (used == static_cast<std::size_t>(negative)) return std::nullopt;
  text.remove_prefix(used);
  while (!text.empty() && text[0] == ' ') text.remove_prefix(1);
  return negative ? 0 : value;
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  ProcStat stat;
  const auto pid = next_number(text);
  const auto close = text.rfind(')');
  if (!pid || close == std::string_view::npos || close + 3 > text.size() || text[close + 1] != ' ') {
    return std::nullopt;
  }
  stat.pid = static_cast<pid_t>(*pid);
  text.remove_prefix(close + 2);
  stat.state = text[0];
  text.remove_prefix(1);
  while (!text.empty() && text[0] == ' ') text.remove_prefix(1);
  const auto parent = next_number(text);
  const auto group = next_number(text);
  if (!parent || !group) return std::nullopt;
  stat.parent = static_cast<pid_t>(*parent);
  stat.process_group = static_cast<pid_t>(*group);
  // Fields 6 to 47, then arg_start and arg_end.
  for (int field = 6; field <= 49; ++field) {
    const auto value = next_number(text);
    if (!value) break;
    if (field == 48) stat.arg_start = *value;
    if (field == 49) stat.arg_end = *value;
  }
  return stat;
}

std::optional<ProcStat> proc_stat(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[4096];  // a line of 52 numbers and a name of at most 16 bytes
  ssize_t n;
  do {
    n = ::read(fd, text, sizeof text);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_proc_stat(std::string_view(text, static_cast<std::size_t>(n)));
}

std::vector<ProcStat> all_proc_stats() {
  std::vector<ProcStat> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    if (auto stat = proc_stat(static_cast<pid_t>(pid))) out.push_back(*stat);
  }
  ::closedir(proc);
  return out;
}

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
