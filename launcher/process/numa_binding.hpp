// --numa_binding: the CPUs each worker runs on, near its GPU, chosen as torchrun 2.11 chooses them
// (torch/numa/binding.py: node, socket, exclusive, core-complex), from sysfs. ddprun applies them
// as the worker's CPU affinity when it starts it (torchrun wraps the worker in numactl
// --physcpubind), so memory, first touched from those CPUs, is the node's too.
#pragma once

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::launcher {

// "0-3,8,10-11" (sysfs' lists) as a set, and back.
std::set<int> parse_cpu_list(const std::string& text);
std::string cpu_list_text(const std::set<int>& cpus);

// The machine as binding sees it: the sysfs tree at `root` ("/sys"; tests make a fake one), the
// GPUs' PCI addresses ("0000:dc:00.0") in CUDA's order, and the CPUs ddprun may use.
struct NumaTopology {
  std::string root = "/sys";
  std::vector<std::string> gpus;
  std::set<int> allowed;
};

// The CPUs for the worker using GPU `gpu_index` under `mode` (node, socket, exclusive or
// core-complex). Throws std::runtime_error saying which file is missing or what does not add up
// (more GPUs on a node than its cores, for exclusive).
std::set<int> numa_cpus(const std::string& mode, const NumaTopology& topology, int gpu_index);

// This machine's GPUs in CUDA's order, as PCI addresses, through nvidia-smi (none without it),
// narrowed by CUDA_VISIBLE_DEVICES when that lists GPU indices.
std::vector<std::string> gpu_pci_addresses(const char* cuda_visible_devices);

}  // namespace ddprun::launcher
