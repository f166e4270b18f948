// DistributedDataParallel as the joinable of a Join (join.hpp): each forward pass of a training
// rank tells the Join how many ranks still train, and a joined rank answers every collective of
// their iterations with zeros, then every rank takes the model of the last to join.
#include <fmt/format.h>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "ddp_impl.hpp"
#include "ddprun/collectives.hpp"
#include "ddprun/join.hpp"

namespace ddprun {

// The training rank's side of a Join iteration, in PyTorch's order: the count of ranks still
// training (Join::notify_join_context), the buffer broadcast from the highest-ranked of them,
// and whether this iteration's backward pass synchronises. Joined ranks match each in
// shadow_iteration(), and then the backward pass's collectives.
void DistributedDataParallel::Impl::join_before_forward() {
  const int training = Join::notify_join_context(*owner);
  if (training > 0) {
    std::lock_guard<std::mutex> lock(mutex);
    set_divisor(divide_by_initial_world_size ? world : training);
  }
  if (options.broadcast_buffers && !buffers.empty() && require_forward_param_sync) {
    broadcast_tensors(*comm, buffers, find_common_rank(true));
  }
  bool syncing;
  {
    std::lock_guard<std::mutex> lock(mutex);
    syncing = sync && at::GradMode::is_enabled();
  }
  at::Tensor flag = at::full({1}, int64_t{syncing ? 1 : 0}, at::TensorOptions().dtype(at::kLong).device(comm->device()));
  comm->start_all_reduce(flag, ReduceOp::kSum)->wait();
}

// The highest rank for which `candidate` holds (PyTorch's _find_common_rank).
int DistributedDataParallel::Impl::find_common_rank(bool candidate) {
  at::Tensor r = at::full({1}, int64_t{candidate ? comm->rank() : -1},
                          at::TensorOptions().dtype(at::kLong).device(comm->device()));
  comm->start_all_reduce(r, ReduceOp::kMax)->wait();
  const int64_t root = r.cpu().data_ptr<int64_t>()[0];
  if (root < 0) throw std::logic_error("DistributedDataParallel: no rank qualifies as the Join's source rank");
  return static_cast<int>(root);
}

void DistributedDataParallel::Impl::shadow_iteration() {
  if (options.broadcast_buffers && !buffers.empty() && require_forward_param_sync) {
    broadcast_tensors(*comm, buffers, find_common_rank(false));
  }
  at::Tensor flag = at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(comm->device()));
  comm->start_all_reduce(flag, ReduceOp::kSum)->wait();
  const bool syncing = flag.cpu().data_ptr<int64_t>()[0] != 0;
  require_forward_param_sync = syncing;
  if (syncing) shadow_backward();
}

// The collectives of one synchronised backward pass (arm, launch_ready_buckets, finalize), with
// zeros for every gradient.
void DistributedDataParallel::Impl::shadow_backward() {
  std::lock_guard<std::mutex> lock(mutex);
  const bool recording = options.static_graph && !static_recorded;
  if (recording) {
    throw std::runtime_error(fmt::format(
        "DistributedDataParallel (static_graph): rank {} joined before its first backward pass, "
        "which static_graph records; give every rank at least one batch", comm->rank()));
  }
  comm->check_agreement(backward_call);
  std::vector<std::unique_ptr<PendingOp>> ops;
  std::vector<GradFuture> futures;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    at::Tensor zeros = at::zeros_like(buckets[b].flat);
    if (comm_hook) {
      GradBucket view{b, zeros, {}, b + 1 == buckets.size()};
      for (std::size_t i : plan[b].params) view.parameters.push_back(params[i]);
      futures.push_back(comm_hook(*comm, view));
    } else {
      ops.push_back(comm->start_all_reduce(zeros, ReduceOp::kSum));
    }
  }
  if (options.find_unused_parameters) {
    at::Tensor used = at::zeros({static_cast<int64_t>(params.size())},
                                at::TensorOptions().dtype(at::kInt).device(comm->device()));
    ops.push_back(comm->start_all_reduce(used, ReduceOp::kMax));
  }
  for (auto& op : ops) op->wait();
  for (auto& f : futures) f.wait();
}

void DistributedDataParallel::Impl::sync_final_model(bool is_last_joiner) {
  const int root = find_common_rank(is_last_joiner);
  std::vector<at::Tensor> state;
  for (const auto& item : module->named_parameters(/*recurse=*/true)) state.push_back(item.value());
  if (options.broadcast_buffers) {
    for (const auto& item : module->named_buffers(/*recurse=*/true)) state.push_back(item.value());
  }
  broadcast_tensors(*comm, state, root);
}

namespace {

class DdpJoinHook : public JoinHook {
 public:
  explicit DdpJoinHook(std::function<void()> main, std::function<void(bool)> post)
      : main_(std::move(main)), post_(std::move(post)) {}
  void main_hook() override { main_(); }
  void post_hook(bool is_last_joiner) override { post_(is_last_joiner); }

 private:
  std::function<void()> main_;
  std::function<void(bool)> post_;
};

}  // namespace

std::unique_ptr<JoinHook> DistributedDataParallel::join_hook(const JoinOptions& options) {
  Impl& s = *impl_;
  s.divide_by_initial_world_size = options.divide_by_initial_world_size;
  if (s.world == 1) return std::make_unique<JoinHook>();
  return std::make_unique<DdpJoinHook>([&s] { s.shadow_iteration(); },
                                       [&s](bool last) { s.sync_final_model(last); });
}

Comm& DistributedDataParallel::join_comm() { return *impl_->comm; }

}  // namespace ddprun
