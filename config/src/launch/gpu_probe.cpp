// How many GPUs this machine has and a CUDA program would see, without linking CUDA: the
// probes run nvidia-smi (or list /proc/driver/nvidia/gpus) in a child process.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>

#include "ddprun/launch_config.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun::config {
namespace {

std::optional<std::string> read_command_output(const char* command) {
  FILE* pipe = ::popen(command, "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  if (::pclose(pipe) != 0) return std::nullopt;
  return output;
}

}  // namespace

int count_gpus(const std::map<std::string, std::string>& environ) {
  int physical = 0;
  if (auto listing = read_command_output("nvidia-smi -L 2>/dev/null")) {
    std::stringstream lines(*listing);
    std::string line;
    while (std::getline(lines, line)) physical += line.rfind("GPU ", 0) == 0;
  } else if (FILE* probe = ::popen("ls /proc/driver/nvidia/gpus 2>/dev/null", "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof buffer, probe) != nullptr) ++physical;
    ::pclose(probe);
  }
  const auto visible = environ.find(env::kCudaVisibleDevices);
  return visible_gpu_count(physical, visible == environ.end() ? std::nullopt
                                                             : std::optional<std::string>(visible->second));
}

int visible_gpu_count(int physical, const std::optional<std::string>& visible) {
  if (!visible) return physical;
  int count = 0;
  std::stringstream items(*visible);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty() || item[0] == '-') break;
    ++count;
  }
  return std::min(count, physical);
}

std::vector<std::string> split_device_list(const std::string& visible) {
  std::vector<std::string> entries;
  std::size_t at = 0;
  for (;;) {
    const std::size_t end = std::min(visible.find(',', at), visible.size());
    const std::string item = visible.substr(at, end - at);
    const auto first = item.find_first_not_of(" \t");
    entries.push_back(first == std::string::npos ? "" : item.substr(first, item.find_last_not_of(" \t") - first + 1));
    if (end == visible.size()) return entries;
    at = end + 1;
  }
}

}  // namespace ddprun::config
