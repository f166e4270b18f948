#include "process/numa_binding.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

namespace ddprun::launcher {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int read_int(const fs::path& path) {
  const std::string text = read_text(path);
  try {
    return std::stoi(text);
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("{} holds no number", path.string()));
  }
}

fs::path cpu_dir(const NumaTopology& t, int cpu) {
  return fs::path(t.root) / "devices/system/cpu" / fmt::format("cpu{}", cpu);
}

// In a one-node machine sysfs often says -1: node 0 then.
int gpu_node(const NumaTopology& t, int gpu_index) {
  if (gpu_index < 0 || gpu_index >= static_cast<int>(t.gpus.size())) {
    throw std::runtime_error(fmt::format("no GPU {} ({} visible)", gpu_index, t.gpus.size()));
  }
  return std::max(read_int(fs::path(t.root) / "bus/pci/devices" / t.gpus[gpu_index] / "numa_node"), 0);
}

std::set<int> node_cpus(const NumaTopology& t, int node) {
  std::set<int> cpus;
  for (int cpu : parse_cpu_list(read_text(fs::path(t.root) / "devices/system/node" / fmt::format("node{}", node) / "cpulist"))) {
    if (t.allowed.count(cpu) > 0) cpus.insert(cpu);
  }
  return cpus;
}

int socket_of_node(const NumaTopology& t, int node) {
  const std::set<int> cpus = node_cpus(t, node);
  if (cpus.empty()) return -1;  // a node without CPUs (memory only) is on no socket of ours
  return read_int(cpu_dir(t, *cpus.begin()) / "topology/physical_package_id");
}

// The GPUs on the node of GPU `gpu_index`, sorted, and that GPU's place among them.
std::pair<int, int> place_on_node(const NumaTopology& t, int gpu_index, int node) {
  int place = 0, count = 0;
  for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
    if (gpu_node(t, g) != node) continue;
    if (g < gpu_index) ++place;
    ++count;
  }
  return {place, count};
}

// A node's CPUs grouped by a key of each CPU (its core, its last-level cache): the groups in
// the key's order, as torchrun's _group_by and sort.
template <typename Key>
std::vector<std::set<int>> grouped(const std::set<int>& cpus, Key key) {
  std::map<int, std::set<int>> groups;
  for (int cpu : cpus) groups[key(cpu)].insert(cpu);
  std::vector<std::set<int>> out;
  for (auto& [k, group] : groups) out.push_back(std::move(group));
  return out;
}

// The lowest CPU sharing the last level data/unified cache with `cpu`: names that cache.
int last_level_cache(const NumaTopology& t, int cpu) {
  int best_level = -1;
  std::set<int> sharing = {cpu};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cpu_dir(t, cpu) / "cache", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("index", 0) != 0 || name.size() == 5 ||
        !std::all_of(name.begin() + 5, name.end(), [](unsigned char c) { return std::isdigit(c); })) {
      continue;
    }
    std::string type = read_text(entry.path() / "type");
    type.erase(type.find_last_not_of(" \n") + 1);
    if (type != "Unified" && type != "Data") continue;
    const int level = read_int(entry.path() / "level");
    if (level <= best_level) continue;
    best_level = level;
    sharing = parse_cpu_list(read_text(entry.path() / "shared_cpu_list"));
  }
  if (ec) throw std::runtime_error(fmt::format("cannot list {}", (cpu_dir(t, cpu) / "cache").string()));
  return *sharing.begin();
}

std::set<int> exclusive_cpus(const NumaTopology& t, int gpu_index, int node) {
  const auto [place, gpus] = place_on_node(t, gpu_index, node);
  const auto cores = grouped(node_cpus(t, node), [&](int cpu) {
    return *parse_cpu_list(read_text(cpu_dir(t, cpu) / "topology/thread_siblings_list")).begin();
  });
  const int per_gpu = static_cast<int>(cores.size()) / gpus;
  const int extra = static_cast<int>(cores.size()) % gpus;  // the lowest GPUs get one more core
  if (per_gpu < 1) {
    throw std::runtime_error(
        fmt::format("NUMA node {} has {} physical cores for its {} GPUs", node, cores.size(), gpus));
  }
  const int begin = place * per_gpu + std::min(place, extra);
  const int end = begin + per_gpu + (place < extra ? 1 : 0);
  std::set<int> cpus;
  for (int i = begin; i < end; ++i) cpus.insert(cores[i].begin(), cores[i].end());
  return cpus;
}

std::set<int> core_complex_cpus(const NumaTopology& t, int gpu_index, int node) {
  const int place = place_on_node(t, gpu_index, node).first;
  auto caches = grouped(node_cpus(t, node), [&](int cpu) { return last_level_cache(t, cpu); });
  // The caches with the most CPUs first, then by their lowest CPU.
  std::stable_sort(caches.begin(), caches.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  if (caches.empty()) throw std::runtime_error(fmt::format("NUMA node {} has no CPU ddprun may use", node));
  return caches[place % caches.size()];
}

}  // namespace

std::set<int> parse_cpu_list(const std::string& text) {
  std::set<int> cpus;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }), item.end());
    if (item.empty()) continue;
    const auto dash = item.find('-');
    try {
      const int first = std::stoi(item.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
      for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
    } catch (const std::exception&) {
      throw std::runtime_error(fmt::format("not a CPU list: {}", text));
    }
  }
  return cpus;
}

std::string cpu_list_text(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    while (++it != cpus.end() && *it == last + 1) last = *it;
    out += fmt::format("{}{}", out.empty() ? "" : ",", first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last));
  }
  return out;
}

std::set<int> numa_cpus(const std::string& mode, const NumaTopology& t, int gpu_index) {
  const int node = gpu_node(t, gpu_index);
  std::set<int> cpus;
  if (mode == "node") {
    cpus = node_cpus(t, node);
  } else if (mode == "socket") {
    const int socket = socket_of_node(t, node);
    for (int other : parse_cpu_list(read_text(fs::path(t.root) / "devices/system/node/possible"))) {
      if (socket_of_node(t, other) == socket) {
        const auto more = node_cpus(t, other);
        cpus.insert(more.begin(), more.end());
      }
    }
  } else if (mode == "exclusive") {
    cpus = exclusive_cpus(t, gpu_index, node);
  } else if (mode == "core-complex") {
    cpus = core_complex_cpus(t, gpu_index, node);
  } else {
    throw std::runtime_error(fmt::format("unknown mode {}", mode));
  }
  if (cpus.empty()) throw std::runtime_error(fmt::format("NUMA node {} has no CPU ddprun may use", node));
  return cpus;
}

std::vector<std::string> gpu_pci_addresses(const char* cuda_visible_devices) {
  std::vector<std::string> all;
  if (FILE* pipe = ::popen("nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, pipe) != nullptr) {
      std::string id(line);
      id.erase(std::remove_if(id.begin(), id.end(), [](unsigned char c) { return std::isspace(c); }), id.end());
      std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
      // nvidia-smi: 00000000:DC:00.0 (an 8-digit domain); sysfs: 0000:dc:00.0.
      if (id.size() > 12) id = id.substr(id.size() - 12);
      if (!id.empty()) all.push_back(id);
    }
    if (::pclose(pipe) != 0) all.clear();
  }
  if (cuda_visible_devices == nullptr) return all;
  std::vector<std::string> visible;
  std::stringstream items(cuda_visible_devices);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty() || !std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); })) break;
    const auto index = static_cast<std::size_t>(std::stoul(item));
    if (index >= all.size()) break;
    visible.push_back(all[index]);
  }
  return visible;
}

}  // namespace ddprun::launcher
