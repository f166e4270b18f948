// DistributedDataParallel's private state, shared by the sources that implement it: ddp.cpp
// (construction and the public methods), ddp_graph.cpp (the hooks and the module they follow),
// ddp_reducer.cpp (what happens in backward) and ddp_join.cpp (uneven inputs).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/collectives.hpp"
#include "ddprun/comm.hpp"
#include "ddprun/comm_hook.hpp"
#include "ddprun/ddp.hpp"
#include "run/progress.hpp"

namespace ddprun {

struct DDPRUN_NO_EXPORT DistributedDataParallel::Impl {
  struct BucketState {
    at::Tensor flat;
    std::size_t pending = 0;
    std::unique_ptr<PendingOp> op;          // without a comm hook
    std::unique_ptr<GradFuture> future;     // with one

    // The reduced bucket, in `flat` (ddp_reducer.cpp).
    void wait();
  };

  DistributedDataParallel* owner = nullptr;
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Comm> comm;
  DdpOptions options;
  int world = 1;
  CommHook comm_hook;          // empty: the built-in average
  bool backward_seen = false;  // a synchronised backward pass has started

  // Parameters that require a gradient, in registration order; the ones DDP averages.
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::vector<at::Tensor> buffers;
  // impl::grad_accumulator() hands out a node that autograd only references weakly: we keep
  // it alive, or our hook would vanish with it.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hook_keys;

  std::vector<Bucket> plan;
  std::vector<BucketState> buckets;
  std::vector<std::size_t> bucket_of;
  // Each parameter's slice of its bucket, shaped like the parameter. With
  // gradient_as_bucket_view, also the parameter's .grad() once it has had one.
  std::vector<at::Tensor> views;
  at::Tensor divisor;
  int divisor_value = 0;  // divisor's value: the world size, or under a Join the training ranks

  std::mutex mutex;
  bool sync = true;
  // True between the first hook of a synchronised backward pass and its end.
  bool armed = false;
  // Meanwhile the progress record says the rank is in it (a "ddp_backward" collective).
  std::optional<detail::CollectiveProgress> backward_progress;
  std::size_t next_launch = 0;
  std::vector<char> ready;
  // From the graph walk after forward (find_unused_parameters): parameters backward will not reach.
  std::vector<char> unreachable;
  bool graph_walked = false;

  // The agreement check's description of one synchronised backward pass.
  CollectiveCall backward_call;

  // Under a Join (join.hpp): JoinOptions::divide_by_initial_world_size.
  bool divide_by_initial_world_size = true;
  // PyTorch's require_forward_param_sync: the last forward pass ran with gradients and with
  // sync, so the next one broadcasts buffers. Joined ranks learn it from the training ranks.
  bool require_forward_param_sync = true;

  // static_graph: the first synchronised backward pass has been recorded.
  bool static_recorded = false;
  std::vector<int> fires;             // AccumulateGrad hook calls per parameter in this pass
  std::vector<int> expected;          // ... in the recorded pass
  std::vector<char> globally_unused;  // no rank's recorded pass reached it: .grad stays undefined
  // Outlives the wrapper only in the hooks on forward outputs, which then do nothing.
  std::shared_ptr<char> alive = std::make_shared<char>();

  // ddp_graph.cpp: the hooks on the parameters' gradient accumulators, kept on the module's
  // current parameters, and which of them a forward pass's graph reaches.
  void install_hooks();
  void hook(std::size_t index, std::shared_ptr<torch::autograd::Node> accumulator);
  void follow_module();
  void walk_graph(const std::vector<at::Tensor>& outputs);

  // ddp_reducer.cpp: one synchronised backward pass, from its first gradient (or its first
  // forward output's node) to the finalize callback at its end.
  void arm_at_outputs(const std::vector<at::Tensor>& outputs);
  void on_grad_ready(std::size_t index);
  void arm();
  void mark_ready(std::size_t index);
  void launch_ready_buckets();
  void finalize();
  void set_divisor(int value);

  // ddp_join.cpp: Join, the training rank's side, then the joined rank's.
  void join_before_forward();
  int find_common_rank(bool candidate);
  void shadow_iteration();
  void shadow_backward();
  void sync_final_model(bool is_last_joiner);
};

}  // namespace ddprun
