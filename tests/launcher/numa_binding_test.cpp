// --numa_binding's choice of CPUs, on a fake sysfs tree: two sockets, three NUMA nodes (one on
// socket 1 has no GPU), four GPUs (one whose node sysfs gives as -1), two L3 caches on node 0.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "process/numa_binding.hpp"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// cpu -> (socket, its hyperthread siblings, the CPUs sharing its L3 cache)
struct Cpu {
  int socket;
  std::string siblings, l3;
};

struct FakeSysfs {
  fs::path root;
  FakeSysfs() {
    root = fs::temp_directory_path() / fmt::format("ddprun-numa-test-{}", ::getpid());
    fs::remove_all(root);
    std::map<int, Cpu> cpus;
    for (int core = 0; core < 4; ++core) {  // node 0: cores 0-3, threads c and c+8; L3 per two cores
      const std::string l3 = core < 2 ? "0-1,8-9" : "2-3,10-11";
      cpus[core] = cpus[core + 8] = {0, fmt::format("{},{}", core, core + 8), l3};
    }
    for (int core = 4; core < 8; ++core) cpus[core] = cpus[core + 8] = {1, fmt::format("{},{}", core, core + 8), "4-7,12-15"};
    cpus[16] = {1, "16", "16-17"};  // node 2: two single-thread cores, no GPU
    cpus[17] = {1, "17", "16-17"};
    for (const auto& [cpu, c] : cpus) {
      const fs::path dir = root / "devices/system/cpu" / fmt::format("cpu{}", cpu);
      put(dir / "topology/physical_package_id", std::to_string(c.socket));
      put(dir / "topology/thread_siblings_list", c.siblings);
      put(dir / "cache/index0/type", "Data");
      put(dir / "cache/index0/level", "1");
      put(dir / "cache/index0/shared_cpu_list", c.siblings);
      put(dir / "cache/index1/type", "Instruction");
      put(dir / "cache/index1/level", "1");
      put(dir / "cache/index1/shared_cpu_list", c.siblings);
      put(dir / "cache/index3/type", "Unified");
      put(dir / "cache/index3/level", "3");
      put(dir / "cache/index3/shared_cpu_list", c.l3);
      put(dir / "cache/index2/type", "Unified");
      put(dir / "cache/index2/level", "2");
      put(dir / "cache/index2/shared_cpu_list", c.siblings);
      put(dir / "cache/uevent", "");  // not an indexN folder
    }
    put(root / "devices/system/node/possible", "0-2");
    put(root / "devices/system/node/node0/cpulist", "0-3,8-11");
    put(root / "devices/system/node/node1/cpulist", "4-7,12-15");
    put(root / "devices/system/node/node2/cpulist", "16-17");
    const std::vector<std::pair<std::string, std::string>> gpus = {
        {"0000:01:00.0", "0"}, {"0000:41:00.0", "0"}, {"0000:81:00.0", "1"}, {"0000:c1:00.0", "-1"}};
    for (const auto& [pci, node] : gpus) put(root / "bus/pci/devices" / pci / "numa_node", node);
  }
  ~FakeSysfs() { fs::remove_all(root); }
  NumaTopology topology(std::set<int> allowed = {}) const {
    NumaTopology t;
    t.root = root.string();
    t.gpus = {"0000:01:00.0", "0000:41:00.0", "0000:81:00.0", "0000:c1:00.0"};
    if (allowed.empty()) {
      for (int cpu = 0; cpu < 18; ++cpu) allowed.insert(cpu);
    }
    t.allowed = allowed;
    return t;
  }
};

}  // namespace

TEST_CASE("CPU lists as sysfs writes them") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::set<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("") == std::set<int>{});
  CHECK(cpu_list_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(cpu_list_text({5}) == "5");
  CHECK_THROWS_AS(parse_cpu_list("a-b"), std::runtime_error);
}

TEST_CASE("the CPUs of each mode, as torchrun 2.11's torch/numa/binding.py chooses them") {
  const FakeSysfs sysfs;
  struct Case {
    std::string mode;
    int gpu;
    std::string cpus;
  };
  const std::vector<Case> cases = {
      // node: every CPU of the GPU's node; -1 (one-node machines) is node 0.
      {"node", 0, "0-3,8-11"},
      {"node", 2, "4-7,12-15"},
      {"node", 3, "0-3,8-11"},
      // socket: every node of the socket of the GPU's node.
      {"socket", 2, "4-7,12-17"},
      {"socket", 0, "0-3,8-11"},
      // exclusive: node 0's 4 cores among its 3 GPUs (0, 1, 3); the lowest GPU gets the extra core.
      {"exclusive", 0, "0-1,8-9"},
      {"exclusive", 1, "2,10"},
      {"exclusive", 3, "3,11"},
      {"exclusive", 2, "4-7,12-15"},
      // core-complex: one L3 cache each, the largest first, round robin over the node's GPUs.
      {"core-complex", 0, "0-1,8-9"},
      {"core-complex", 1, "2-3,10-11"},
      {"core-complex", 3, "0-1,8-9"},
      {"core-complex", 2, "4-7,12-15"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.mode);
    CAPTURE(c.gpu);
    CHECK(cpu_list_text(numa_cpus(c.mode, sysfs.topology(), c.gpu)) == c.cpus);
  }
}

TEST_CASE("binding keeps to the CPUs ddprun may use, and says what is missing") {
  const FakeSysfs sysfs;
  std::set<int> allowed;
  for (int cpu = 0; cpu < 18; ++cpu) allowed.insert(cpu);
  allowed.erase(9);
  CHECK(cpu_list_text(numa_cpus("node", sysfs.topology(allowed), 0)) == "0-3,8,10-11");
  CHECK_THROWS_WITH(numa_cpus("node", sysfs.topology({16, 17}), 0), doctest::Contains("NUMA node 0 has no CPU"));
  CHECK_THROWS_WITH(numa_cpus("node", sysfs.topology(), 4), doctest::Contains("no GPU 4 (4 visible)"));
  auto t = sysfs.topology();
  t.gpus[0] = "0000:02:00.0";
  CHECK_THROWS_WITH(numa_cpus("node", t, 0), doctest::Contains("0000:02:00.0/numa_node"));
  // exclusive with more GPUs on a node than cores there
  t = sysfs.topology({0, 8});
  CHECK_THROWS_WITH(numa_cpus("exclusive", t, 0), doctest::Contains("NUMA node 0 has 1 physical cores for its 3 GPUs"));
}
