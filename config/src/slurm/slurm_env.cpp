#include "ddprun/slurm_env.hpp"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddprun/hostlist.hpp"
#include "ddprun/input_limits.hpp"
#include "ddprun/worker_env.hpp"

namespace ddprun::slurm {
namespace {

// A variable that is set, with its name kept for error messages.
struct Var {
  const char* name;
  std::string value;
};

// The first of `names` that is set to a non-empty value.
std::optional<Var> first_of(const Environment& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) return Var{name, it->second};
  }
  return std::nullopt;
}

[[noreturn]] void bad(const Var& var, std::string_view problem) {
  throw SlurmEnvError(fmt::format("{}=\"{}\" {}", var.name, shown(var.value), problem));
}

int parse_int(const Var& var, int min, int max = INT_MAX) {
  long long value = 0;
  if (var.value.empty()) bad(var, "is not a number");
  for (char c : var.value) {
    if (c < '0' || c > '9') bad(var, "is not a number");
    value = value * 10 + (c - '0');
    if (value > max) break;
  }
  if (value < min || value > max) bad(var, fmt::format("is outside {}..{}", min, max));
  return static_cast<int>(value);
}

// A job or step id: SLURM's are numbers; anything long or with control characters is not one,
// and would end up in messages and (as the rendezvous id) in folder names.
Var identifier(Var var) {
  if (var.value.size() > 64 || std::any_of(var.value.begin(), var.value.end(), [](unsigned char c) { return c < 0x20; })) {
    bad(var, "is not a SLURM id (at most 64 printable characters)");
  }
  return var;
}

Var require(const Environment& env, const char* name, std::string_view where) {
  auto var = first_of(env, {name});
  if (!var) throw SlurmEnvError(fmt::format("{} is not set in {}", name, where));
  return *var;
}

std::vector<std::string> expand(const Var& list) {
  try {
    return expand_hostlist(list.value);
  } catch (const HostlistError& e) {
    throw SlurmEnvError(fmt::format("{}: {}", list.name, e.what()));
  }
}

// The node count, checked against the node list when both are known.
std::optional<int> node_count(const std::optional<Var>& count, const std::vector<std::string>& hosts,
                              const std::optional<Var>& list) {
  if (!count) return hosts.empty() ? std::nullopt : std::optional<int>(static_cast<int>(hosts.size()));
  const int n = parse_int(*count, 1);
  if (list && static_cast<std::size_t>(n) != hosts.size()) {
    bad(*count, fmt::format("contradicts {}=\"{}\", which names {} hosts", list->name, shown(list->value), hosts.size()));
  }
  return n;
}

}  // namespace

SlurmInference infer_from_slurm(const Environment& env) {
  namespace e = ddprun::env;
  SlurmInference r;
  const auto job = first_of(env, {e::kSlurmJobId});
  if (!job) return r;
  r.in_slurm = true;
  r.job_id = identifier(*job).value;
  if (auto step = first_of(env, {e::kSlurmStepId, e::kSlurmStepIdOld})) r.step_id = identifier(*step).value;
  r.in_step = r.step_id.has_value();
  r.run_id = r.in_step ? r.job_id + "." + *r.step_id : r.job_id;
  if (auto gpus = first_of(env, {e::kSlurmGpusOnNode})) r.gpus_on_node = parse_int(*gpus, 0);

  const auto list = r.in_step ? first_of(env, {e::kSlurmStepNodelist, e::kSlurmNodelist, e::kSlurmJobNodelist})
                              : first_of(env, {e::kSlurmJobNodelist, e::kSlurmNodelist});
  const std::vector<std::string> hosts = list ? expand(*list) : std::vector<std::string>{};
  if (!hosts.empty()) r.master_addr = hosts.front();
  const auto count = r.in_step ? first_of(env, {e::kSlurmStepNumNodes, e::kSlurmNnodes})
                               : first_of(env, {e::kSlurmJobNumNodes, e::kSlurmNnodes});
  const std::optional<int> nodes = node_count(count, hosts, list);
  const auto node_id = first_of(env, {e::kSlurmNodeId});

  if (r.in_step) {
    const auto tasks = first_of(env, {e::kSlurmStepNumTasks, e::kSlurmNtasks});
    const int ntasks = tasks ? parse_int(*tasks, 1) : 0;
    if (nodes && tasks && ntasks != *nodes) {
      r.layout_error = fmt::format(
          "srun started {} tasks on {} nodes, so several ddprun run on one node; ddprun starts the "
          "workers itself and needs one task per node: use `srun --ntasks-per-node=1 ddprun ...` "
          "(and `#SBATCH --ntasks-per-node=1`: srun inherits the batch script's task count), or "
          "give --nnodes and --node_rank",
          ntasks, *nodes);
    } else if (nodes) {
      if (!node_id) throw SlurmEnvError(fmt::format("{} is not set in SLURM step {}", e::kSlurmNodeId, r.run_id.value()));
      r.nnodes = nodes;
      r.node_rank = parse_int(*node_id, 0);
    }
  } else if (nodes == 1) {
    r.nnodes = 1;
    r.node_rank = node_id ? parse_int(*node_id, 0) : 0;
  } else if (nodes) {
    r.layout_error = fmt::format(
        "ddprun runs outside srun in SLURM job {} of {} nodes, so only this node would join; start "
        "one ddprun per node with `srun --ntasks-per-node=1 ddprun ...`, or give --nnodes and --node_rank",
        r.job_id, *nodes);
  }
  if (r.node_rank && *r.node_rank >= *r.nnodes) {
    bad(*node_id, fmt::format("is not below the node count {}", *r.nnodes));
  }
  r.summary = describe(r, r.master_addr ? fmt::format("{}:{}", *r.master_addr, kDefaultRendezvousPort) : "");
  return r;
}

std::string describe(const SlurmInference& r, std::string_view rendezvous_endpoint) {
  if (!r.in_slurm) return "";
  std::string line = fmt::format("ddprun: SLURM job {}", r.job_id);
  line += r.step_id ? fmt::format(" step {}", *r.step_id) : std::string(" (outside srun)");
  std::vector<std::string> parts;
  if (r.nnodes) parts.push_back(fmt::format("{} node{}", *r.nnodes, *r.nnodes == 1 ? "" : "s"));
  if (r.node_rank) parts.push_back(fmt::format("node rank {}", *r.node_rank));
  if (r.layout_error) parts.emplace_back("no node rank (one ddprun per node needed)");
  if (r.gpus_on_node) parts.push_back(fmt::format("{} GPU{} on this node", *r.gpus_on_node, *r.gpus_on_node == 1 ? "" : "s"));
  if (!rendezvous_endpoint.empty()) parts.push_back(fmt::format("rendezvous at {}", rendezvous_endpoint));
  if (r.run_id) parts.push_back(fmt::format("run id {}", *r.run_id));
  if (!parts.empty()) line += ": " + fmt::format("{}", fmt::join(parts, ", "));
  return line;
}

std::optional<WorkerIdentity> worker_identity_from_slurm(const Environment& env) {
  namespace e = ddprun::env;
  const auto job = first_of(env, {e::kSlurmJobId});
  const auto step = first_of(env, {e::kSlurmStepId, e::kSlurmStepIdOld});
  const auto procid = first_of(env, {e::kSlurmProcId});
  if (!job || !step || !procid) return std::nullopt;

  WorkerIdentity w;
  w.run_id = identifier(*job).value + "." + identifier(*step).value;
  const std::string where = "SLURM step " + w.run_id;
  const auto tasks = first_of(env, {e::kSlurmStepNumTasks, e::kSlurmNtasks});
  if (!tasks) throw SlurmEnvError(fmt::format("neither {} nor {} is set in {}", e::kSlurmStepNumTasks, e::kSlurmNtasks, where));
  w.world_size = parse_int(*tasks, 1);
  w.rank = parse_int(*procid, 0, w.world_size - 1);
  const Var local_id = require(env, e::kSlurmLocalId, where);
  const Var node_id = require(env, e::kSlurmNodeId, where);

  const auto list = first_of(env, {e::kSlurmStepNodelist, e::kSlurmNodelist, e::kSlurmJobNodelist});
  if (!list) throw SlurmEnvError(fmt::format("no node list ({}) is set in {}", e::kSlurmStepNodelist, where));
  const std::vector<std::string> hosts = expand(*list);
  w.group_world_size = *node_count(first_of(env, {e::kSlurmStepNumNodes, e::kSlurmNnodes}), hosts, list);
  w.group_rank = parse_int(node_id, 0, w.group_world_size - 1);

  if (auto per_node = first_of(env, {e::kSlurmStepTasksPerNode, e::kSlurmTasksPerNode})) {
    const std::vector<int> counts = expand_tasks_per_node(per_node->value, per_node->name);
    if (counts.size() != static_cast<std::size_t>(w.group_world_size)) {
      bad(*per_node, fmt::format("has {} entries for {} nodes", counts.size(), w.group_world_size));
    }
    if (std::accumulate(counts.begin(), counts.end(), 0LL) != w.world_size) {
      bad(*per_node, fmt::format("does not add up to {}={}", tasks->name, w.world_size));
    }
    w.local_world_size = counts[static_cast<std::size_t>(w.group_rank)];
  } else if (auto ntasks_per_node = first_of(env, {e::kSlurmNtasksPerNode})) {
    w.local_world_size = parse_int(*ntasks_per_node, 1);
  } else {
    throw SlurmEnvError(fmt::format("none of {}, {}, {} is set in {}", e::kSlurmStepTasksPerNode,
                                    e::kSlurmTasksPerNode, e::kSlurmNtasksPerNode, where));
  }
  w.local_rank = parse_int(local_id, 0, w.local_world_size - 1);

  const auto addr = first_of(env, {e::kMasterAddr});
  w.master_addr = addr ? addr->value : hosts.front();
  const auto port = first_of(env, {e::kMasterPort});
  w.master_port = port ? parse_int(*port, 1, 65535) : master_port_for_job(job->value);
  return w;
}

std::vector<int> expand_tasks_per_node(std::string_view counts, std::string_view variable) {
  auto fail = [&](std::string_view problem) {
    throw SlurmEnvError(fmt::format("{}=\"{}\" {}", variable, shown(counts), problem));
  };
  // One number of at most 9 digits starting at `i`; advances `i` past it.
  auto number = [&](std::size_t& i) {
    const std::size_t begin = i;
    int value = 0;
    while (i < counts.size() && counts[i] >= '0' && counts[i] <= '9' && i - begin < 9) {
      value = value * 10 + (counts[i++] - '0');
    }
    if (i == begin || value == 0) fail(fmt::format("needs a positive number at offset {}", begin));
    return value;
  };
  std::vector<int> out;
  for (std::size_t i = 0;; ++i) {  // i: start of an item
    const int count = number(i);
    int repeat = 1;
    if (counts.substr(i, 2) == "(x") {
      i += 2;
      repeat = number(i);
      if (counts.substr(i, 1) != ")") fail(fmt::format("needs ')' at offset {}", i));
      ++i;
    }
    if (out.size() + static_cast<std::size_t>(repeat) > kMaxHosts) fail(fmt::format("counts more than {} nodes", kMaxHosts));
    out.insert(out.end(), static_cast<std::size_t>(repeat), count);
    if (i == counts.size()) return out;
    if (counts[i] != ',') fail(fmt::format("needs ',' at offset {}", i));
  }
}

int master_port_for_job(std::string_view job_id) {
  if (job_id.empty() || job_id.find_first_not_of("0123456789") != std::string_view::npos) {
    throw SlurmEnvError(fmt::format("{}=\"{}\" is not a number", env::kSlurmJobId, shown(job_id)));
  }
  const std::string_view last4 = job_id.substr(job_id.size() > 4 ? job_id.size() - 4 : 0);
  return kMasterPortBase + std::stoi(std::string(last4));
}

Environment environment_from(const char* const* envp) {
  Environment env;
  for (; envp != nullptr && *envp != nullptr; ++envp) {
    const std::string_view entry(*envp);
    const std::size_t eq = entry.find('=');
    if (eq != std::string_view::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

}  // namespace ddprun::slurm
