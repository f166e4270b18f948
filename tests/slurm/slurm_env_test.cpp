// infer_from_slurm and worker_identity_from_slurm as tables. The environments are trimmed copies
// of what tasks and batch scripts saw on the test cluster (scripts/slurm/cluster.sh, SLURM 22.05).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "ddprun/slurm_env.hpp"

using namespace ddprun::slurm;

namespace {

// `base` with `changes` applied; a change to "" removes the variable.
Environment with(Environment base, const Environment& changes) {
  for (const auto& [name, value] : changes) {
    if (value.empty()) {
      base.erase(name);
    } else {
      base[name] = value;
    }
  }
  return base;
}

// A task of `srun --ntasks-per-node=1` in a 2-node job, on the second node.
const Environment kStepTask = {
    {"SLURM_JOB_ID", "123"},          {"SLURM_JOBID", "123"},
    {"SLURM_STEP_ID", "0"},           {"SLURM_STEPID", "0"},
    {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_NODELIST", "n[1-2]"},
    {"SLURM_STEP_NODELIST", "n[1-2]"},
    {"SLURM_JOB_NUM_NODES", "2"},     {"SLURM_NNODES", "2"},
    {"SLURM_STEP_NUM_NODES", "2"},    {"SLURM_NODEID", "1"},
    {"SLURM_PROCID", "1"},            {"SLURM_LOCALID", "0"},
    {"SLURM_NTASKS", "2"},            {"SLURM_STEP_NUM_TASKS", "2"},
    {"SLURM_NTASKS_PER_NODE", "1"},   {"SLURM_TASKS_PER_NODE", "1(x2)"},
    {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
    {"SLURM_LAUNCH_NODE_IPADDR", "10.9.9.9"},  // the submit host: must never be used
    {"SLURMD_NODENAME", "n2"},
};

// The batch script of `sbatch -N2 --ntasks-per-node=2` (no step variables).
const Environment kBatchScript = {
    {"SLURM_JOB_ID", "123"},          {"SLURM_JOB_NODELIST", "n[1-2]"},
    {"SLURM_NODELIST", "n[1-2]"},     {"SLURM_JOB_NUM_NODES", "2"},
    {"SLURM_NNODES", "2"},            {"SLURM_NODEID", "0"},
    {"SLURM_PROCID", "0"},            {"SLURM_LOCALID", "0"},
    {"SLURM_NTASKS", "4"},            {"SLURM_NTASKS_PER_NODE", "2"},
    {"SLURM_TASKS_PER_NODE", "2(x2)"},
    {"SLURM_LAUNCH_NODE_IPADDR", "10.9.9.9"},
};

struct InferCase {
  const char* name;
  Environment env;
  bool in_slurm;
  bool in_step;
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  std::optional<std::string> master_addr;
  std::optional<std::string> run_id;
  std::optional<int> gpus;
  const char* layout_error;  // substring, or nullptr for none
  const char* summary;
};

const InferCase kInfer[] = {
    {"outside SLURM", {}, false, false, {}, {}, {}, {}, {}, nullptr, ""},
    {"step, one task per node", kStepTask, true, true, 2, 1, "n1", "123.0", {}, nullptr,
     "ddprun: SLURM job 123 step 0: 2 nodes, node rank 1, rendezvous at n1:29400, run id 123.0"},
    {"step on part of the job: the step's list wins",
     with(kStepTask, {{"SLURM_JOB_NODELIST", "n[1-4]"}, {"SLURM_JOB_NUM_NODES", "4"}, {"SLURM_STEP_NODELIST", "n[3-4]"},
                      {"SLURM_NODELIST", "n[3-4]"}, {"SLURM_NODEID", "0"}, {"SLURM_STEP_ID", "5"}}),
     true, true, 2, 0, "n3", "123.5", {}, nullptr,
     "ddprun: SLURM job 123 step 5: 2 nodes, node rank 0, rendezvous at n3:29400, run id 123.5"},
    {"older spellings only",
     with(kStepTask, {{"SLURM_STEP_ID", ""}, {"SLURM_STEP_NODELIST", ""}, {"SLURM_STEP_NUM_NODES", ""},
                      {"SLURM_STEP_NUM_TASKS", ""}, {"SLURM_STEPID", "7"}}),
     true, true, 2, 1, "n1", "123.7", {}, nullptr,
     "ddprun: SLURM job 123 step 7: 2 nodes, node rank 1, rendezvous at n1:29400, run id 123.7"},
    {"zero-padded names", with(kStepTask, {{"SLURM_STEP_NODELIST", "gpu[007-008]"}}), true, true, 2, 1, "gpu007",
     "123.0", {}, nullptr,
     "ddprun: SLURM job 123 step 0: 2 nodes, node rank 1, rendezvous at gpu007:29400, run id 123.0"},
    {"GPUs on the node", with(kStepTask, {{"SLURM_GPUS_ON_NODE", "4"}}), true, true, 2, 1, "n1", "123.0", 4, nullptr,
     "ddprun: SLURM job 123 step 0: 2 nodes, node rank 1, 4 GPUs on this node, rendezvous at n1:29400, run id 123.0"},
    {"several ddprun per node: no node rank",
     with(kStepTask, {{"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "3"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}}),
     true, true, {}, {}, "n1", "123.0", {}, "srun started 4 tasks on 2 nodes",
     "ddprun: SLURM job 123 step 0: no node rank (one ddprun per node needed), rendezvous at n1:29400, run id 123.0"},
    {"batch script of a 2-node job: no node rank", kBatchScript, true, false, {}, {}, "n1", "123", {},
     "ddprun runs outside srun in SLURM job 123 of 2 nodes",
     "ddprun: SLURM job 123 (outside srun): no node rank (one ddprun per node needed), rendezvous at n1:29400, run id 123"},
    {"batch script of a 1-node job",
     with(kBatchScript, {{"SLURM_JOB_NODELIST", "n7"}, {"SLURM_NODELIST", "n7"}, {"SLURM_JOB_NUM_NODES", "1"},
                         {"SLURM_NNODES", "1"}, {"SLURM_GPUS_ON_NODE", "1"}}),
     true, false, 1, 0, "n7", "123", 1, nullptr,
     "ddprun: SLURM job 123 (outside srun): 1 node, node rank 0, 1 GPU on this node, rendezvous at n7:29400, run id 123"},
    {"salloc shell of a 1-node job (no node id)",
     {{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "n2"}, {"SLURM_NNODES", "1"}}, true, false, 1, 0, "n2", "9", {},
     nullptr, "ddprun: SLURM job 9 (outside srun): 1 node, node rank 0, rendezvous at n2:29400, run id 9"},
    {"node count from the list alone", {{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NODELIST", "a,b,c"},
                                        {"SLURM_NODEID", "2"}},
     true, true, 3, 2, "a", "9.0", {}, nullptr,
     "ddprun: SLURM job 9 step 0: 3 nodes, node rank 2, rendezvous at a:29400, run id 9.0"},
};

struct ErrorCase {
  const char* name;
  Environment env;
  const char* message;  // substring of what()
};

const ErrorCase kInferErrors[] = {
    {"node count not a number", with(kStepTask, {{"SLURM_STEP_NUM_NODES", "two"}}),
     "SLURM_STEP_NUM_NODES=\"two\" is not a number"},
    {"node count contradicts the list", with(kStepTask, {{"SLURM_STEP_NUM_NODES", "3"}}),
     "SLURM_STEP_NUM_NODES=\"3\" contradicts SLURM_STEP_NODELIST=\"n[1-2]\", which names 2 hosts"},
    {"node rank past the end", with(kStepTask, {{"SLURM_NODEID", "2"}}), "SLURM_NODEID=\"2\" is not below the node count 2"},
    {"node id missing in a step", with(kStepTask, {{"SLURM_NODEID", ""}}), "SLURM_NODEID is not set in SLURM step 123.0"},
    {"malformed node list", with(kStepTask, {{"SLURM_STEP_NODELIST", "n[1-"}}),
     "SLURM_STEP_NODELIST: invalid hostlist \"n[1-\": '[' at offset 1 is never closed"},
    {"negative GPU count", with(kStepTask, {{"SLURM_GPUS_ON_NODE", "-1"}}), "SLURM_GPUS_ON_NODE=\"-1\" is not a number"},
};

}  // namespace

TEST_CASE("infer_from_slurm") {
  for (const InferCase& c : kInfer) {
    CAPTURE(std::string(c.name));
    const SlurmInference r = infer_from_slurm(c.env);
    CHECK(r.in_slurm == c.in_slurm);
    CHECK(r.in_step == c.in_step);
    CHECK(r.nnodes == c.nnodes);
    CHECK(r.node_rank == c.node_rank);
    CHECK(r.master_addr == c.master_addr);
    CHECK(r.run_id == c.run_id);
    CHECK(r.gpus_on_node == c.gpus);
    if (c.layout_error) {
      REQUIRE(r.layout_error);
      CHECK_MESSAGE(r.layout_error->find(c.layout_error) != std::string::npos, *r.layout_error);
    } else {
      CHECK_MESSAGE(!r.layout_error, r.layout_error.value_or(""));
    }
    CHECK(r.summary == c.summary);
  }
}

TEST_CASE("infer_from_slurm rejects malformed SLURM variables, naming them") {
  for (const ErrorCase& c : kInferErrors) {
    CAPTURE(std::string(c.name));
    try {
      infer_from_slurm(c.env);
      FAIL("no exception");
    } catch (const SlurmEnvError& e) {
      CHECK_MESSAGE(std::string(e.what()).find(c.message) != std::string::npos, e.what());
    }
  }
}

TEST_CASE("describe uses the endpoint the launcher settled on") {
  const SlurmInference r = infer_from_slurm(kStepTask);
  CHECK(describe(r, "n2:1234") == "ddprun: SLURM job 123 step 0: 2 nodes, node rank 1, rendezvous at n2:1234, run id 123.0");
  CHECK(describe(r, "") == "ddprun: SLURM job 123 step 0: 2 nodes, node rank 1, run id 123.0");
}

namespace {

// A task of `srun -N2 -n4`: rank 3, the second on node 2.
const Environment kSrunWorker = with(kStepTask, {{"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "4"},
                                                 {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "2"},
                                                 {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                                 {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}});

struct WorkerCase {
  const char* name;
  Environment env;
  std::optional<WorkerIdentity> expected;
};

WorkerIdentity identity(int rank, int local_rank, int world_size, int local_world_size, int group_rank,
                        int group_world_size, std::string master_addr, int master_port, std::string run_id) {
  return {rank, local_rank, world_size, local_world_size, group_rank, group_world_size,
          std::move(master_addr), master_port, std::move(run_id)};
}

const WorkerCase kWorkers[] = {
    {"outside SLURM", {}, std::nullopt},
    {"batch script: one process, not a task", kBatchScript, std::nullopt},
    {"srun -N2 -n4, rank 3", kSrunWorker, identity(3, 1, 4, 2, 1, 2, "n1", 15123, "123.0")},
    {"uneven 2,1: the second node runs one task",
     with(kSrunWorker, {{"SLURM_PROCID", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "3"},
                        {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
                        {"SLURM_TASKS_PER_NODE", "2,1"}}),  // SLURM_NTASKS_PER_NODE=2 is inherited, and wrong
     identity(2, 0, 3, 1, 1, 2, "n1", 15123, "123.0")},
    {"compressed 2(x3),1 on the third of four nodes",
     with(kSrunWorker, {{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
                        {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_STEP_NUM_NODES", "4"},
                        {"SLURM_STEP_NODELIST", "gpu[01-04]"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}}),
     identity(5, 1, 7, 2, 2, 4, "gpu01", 15123, "123.0")},
    {"compressed 2(x3),1 on the last node",
     with(kSrunWorker, {{"SLURM_PROCID", "6"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "3"},
                        {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_STEP_NUM_NODES", "4"},
                        {"SLURM_STEP_NODELIST", "gpu[01-04]"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}}),
     identity(6, 0, 7, 1, 3, 4, "gpu01", 15123, "123.0")},
    {"only SLURM_NTASKS_PER_NODE",
     with(kSrunWorker, {{"SLURM_STEP_TASKS_PER_NODE", ""}, {"SLURM_TASKS_PER_NODE", ""}}),
     identity(3, 1, 4, 2, 1, 2, "n1", 15123, "123.0")},
    {"MASTER_ADDR and MASTER_PORT given by the user",
     with(kSrunWorker, {{"MASTER_ADDR", "head.ib"}, {"MASTER_PORT", "29555"}}),
     identity(3, 1, 4, 2, 1, 2, "head.ib", 29555, "123.0")},
    {"long job id: last four digits", with(kSrunWorker, {{"SLURM_JOB_ID", "1234567"}}),
     identity(3, 1, 4, 2, 1, 2, "n1", 19567, "1234567.0")},
};

const ErrorCase kWorkerErrors[] = {
    {"rank past the end", with(kSrunWorker, {{"SLURM_PROCID", "4"}}), "SLURM_PROCID=\"4\" is outside 0..3"},
    {"local rank past the node's tasks", with(kSrunWorker, {{"SLURM_LOCALID", "2"}}),
     "SLURM_LOCALID=\"2\" is outside 0..1"},
    {"node id past the end", with(kSrunWorker, {{"SLURM_NODEID", "2"}}), "SLURM_NODEID=\"2\" is outside 0..1"},
    {"local id missing", with(kSrunWorker, {{"SLURM_LOCALID", ""}}), "SLURM_LOCALID is not set in SLURM step 123.0"},
    {"tasks per node: wrong number of nodes", with(kSrunWorker, {{"SLURM_STEP_TASKS_PER_NODE", "2(x3)"}}),
     "SLURM_STEP_TASKS_PER_NODE=\"2(x3)\" has 3 entries for 2 nodes"},
    {"tasks per node: wrong sum", with(kSrunWorker, {{"SLURM_STEP_TASKS_PER_NODE", "2,3"}}),
     "SLURM_STEP_TASKS_PER_NODE=\"2,3\" does not add up to SLURM_STEP_NUM_TASKS=4"},
    {"no tasks per node at all",
     with(kSrunWorker, {{"SLURM_STEP_TASKS_PER_NODE", ""}, {"SLURM_TASKS_PER_NODE", ""}, {"SLURM_NTASKS_PER_NODE", ""}}),
     "none of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE is set in SLURM step 123.0"},
    {"MASTER_PORT out of range", with(kSrunWorker, {{"MASTER_PORT", "70000"}}), "MASTER_PORT=\"70000\" is outside 1..65535"},
    {"job id not a number", with(kSrunWorker, {{"SLURM_JOB_ID", "12x"}}), "SLURM_JOB_ID=\"12x\" is not a number"},
    {"no task count", with(kSrunWorker, {{"SLURM_STEP_NUM_TASKS", ""}, {"SLURM_NTASKS", ""}}),
     "neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set in SLURM step 123.0"},
};

}  // namespace

TEST_CASE("worker_identity_from_slurm") {
  for (const WorkerCase& c : kWorkers) {
    CAPTURE(std::string(c.name));
    const std::optional<WorkerIdentity> w = worker_identity_from_slurm(c.env);
    REQUIRE(w.has_value() == c.expected.has_value());
    if (!w) continue;
    CHECK(w->rank == c.expected->rank);
    CHECK(w->local_rank == c.expected->local_rank);
    CHECK(w->world_size == c.expected->world_size);
    CHECK(w->local_world_size == c.expected->local_world_size);
    CHECK(w->group_rank == c.expected->group_rank);
    CHECK(w->group_world_size == c.expected->group_world_size);
    CHECK(w->master_addr == c.expected->master_addr);
    CHECK(w->master_port == c.expected->master_port);
    CHECK(w->run_id == c.expected->run_id);
  }
}

TEST_CASE("worker_identity_from_slurm rejects malformed SLURM variables, naming them") {
  for (const ErrorCase& c : kWorkerErrors) {
    CAPTURE(std::string(c.name));
    try {
      worker_identity_from_slurm(c.env);
      FAIL("no exception");
    } catch (const SlurmEnvError& e) {
      CHECK_MESSAGE(std::string(e.what()).find(c.message) != std::string::npos, e.what());
    }
  }
}

TEST_CASE("expand_tasks_per_node") {
  const struct {
    const char* counts;
    std::vector<int> expected;
  } valid[] = {
      {"1", {1}}, {"4(x2)", {4, 4}}, {"2(x3),1", {2, 2, 2, 1}}, {"1,2,3", {1, 2, 3}}, {"3,1(x2),2", {3, 1, 1, 2}},
  };
  for (const auto& c : valid) {
    CAPTURE(std::string(c.counts));
    CHECK(expand_tasks_per_node(c.counts, "X") == c.expected);
  }
  const struct {
    const char* counts;
    const char* message;
  } invalid[] = {
      {"", "X=\"\" needs a positive number at offset 0"},
      {"0", "X=\"0\" needs a positive number at offset 0"},
      {"2(x0)", "needs a positive number at offset 3"},
      {"2(x3", "needs ')' at offset 4"},
      {"2x3", "needs ',' at offset 1"},
      {"2(3)", "needs ',' at offset 1"},
      {"2,", "needs a positive number at offset 2"},
      {",2", "needs a positive number at offset 0"},
      {"1(x2000000)", "counts more than 1048576 nodes"},
  };
  for (const auto& c : invalid) {
    CAPTURE(std::string(c.counts));
    try {
      expand_tasks_per_node(c.counts, "X");
      FAIL("no exception");
    } catch (const SlurmEnvError& e) {
      CHECK_MESSAGE(std::string(e.what()).find(c.message) != std::string::npos, e.what());
    }
  }
}

TEST_CASE("master_port_for_job: 15000 + the last four digits") {
  CHECK(master_port_for_job("1") == 15001);
  CHECK(master_port_for_job("123") == 15123);
  CHECK(master_port_for_job("9999") == 24999);
  CHECK(master_port_for_job("10000") == 15000);
  CHECK(master_port_for_job("98712345") == 17345);
  CHECK_THROWS_AS(master_port_for_job(""), SlurmEnvError);
  CHECK_THROWS_AS(master_port_for_job("-1"), SlurmEnvError);
  CHECK_THROWS_AS(master_port_for_job("12a"), SlurmEnvError);
}

TEST_CASE("environment_from") {
  const char* const envp[] = {"A=1", "B=x=y", "EMPTY=", "NOEQUALS", nullptr};
  CHECK(environment_from(envp) == Environment{{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}});
  CHECK(environment_from(nullptr).empty());
}

TEST_CASE("hostile SLURM variables are refused with a short message") {
  const std::string huge(100000, '9');
  const std::vector<Environment> cases = {
      {{"SLURM_JOB_ID", huge}},
      {{"SLURM_JOB_ID", "1\n2"}},
      {{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", huge}},
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-99999999999]"}},
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", std::string(100000, 'n')}},
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_JOB_NUM_NODES", huge}},
      {{"SLURM_JOB_ID", "7"}, {"SLURM_GPUS_ON_NODE", huge}},
  };
  for (const Environment& env : cases) {
    try {
      infer_from_slurm(env);
      FAIL("no exception");
    } catch (const SlurmEnvError& e) {
      const std::string what = e.what();
      CHECK(what.size() < 400);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
  CHECK_THROWS_AS(expand_tasks_per_node(huge, "SLURM_TASKS_PER_NODE"), SlurmEnvError);
  try {
    expand_tasks_per_node("2(x" + huge + ")", "SLURM_TASKS_PER_NODE");
    FAIL("no exception");
  } catch (const SlurmEnvError& e) {
    CHECK(std::string(e.what()).size() < 300);
  }
}
