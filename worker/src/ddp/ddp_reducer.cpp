// DistributedDataParallel's reducer: what happens in one synchronised backward pass. The pass is
// armed (agreement check, finalize queued) at its first forward output's node or its first
// gradient; each parameter's gradient goes into its bucket as it becomes ready; buckets are
// launched in plan order; finalize waits for them and hands the averages back as gradients.
#include <fmt/format.h>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp_impl.hpp"
#include "ddprun/heartbeat.hpp"

namespace ddprun {

namespace {

// Whether `grad` is exactly `view`'s memory (a gradient DDP pointed at its bucket, still there).
bool is_bucket_view(const at::Tensor& grad, const at::Tensor& view) {
  return grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides() && grad.scalar_type() == view.scalar_type();
}

// Runs `fn` when backward enters a forward output's node, before any gradient of this pass.
class BackwardStartHook : public torch::autograd::FunctionPreHook {
 public:
  explicit BackwardStartHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    fn_();
    return grads;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

void DistributedDataParallel::Impl::BucketState::wait() {
  if (op) op->wait();
  if (!future) return;
  const at::Tensor result = future->wait();
  if (result.is_same(flat)) return;
  if (result.numel() != flat.numel()) {
    throw std::runtime_error(fmt::format(
        "DistributedDataParallel: the communication hook returned {} elements for a bucket of {}",
        result.numel(), flat.numel()));
  }
  at::NoGradGuard no_grad;
  flat.copy_(result.reshape({-1}));
}

// A parameter may get gradients from a reentrant backward (activation checkpointing) run inside
// this one. Were the pass armed from such a nested backward, its finalize would be queued there
// and run when the nested backward ends, too early. A forward output's node runs in the
// outermost backward, before any parameter's: arm there. (The first gradient hook still arms a
// pass that reaches no output's node, e.g. after forward() under no_sync.)
void DistributedDataParallel::Impl::arm_at_outputs(const std::vector<at::Tensor>& outputs) {
  std::weak_ptr<char> token = alive;
  for (const auto& t : outputs) {
    if (!t.defined() || !t.requires_grad() || !t.grad_fn()) continue;
    t.grad_fn()->add_pre_hook(std::make_unique<BackwardStartHook>([this, token] {
      if (token.expired()) return;
      std::lock_guard<std::mutex> lock(mutex);
      if (!sync || armed) return;
      try {
        arm();
      } catch (...) {
        armed = false;
        throw;
      }
    }));
  }
}

void DistributedDataParallel::Impl::set_divisor(int value) {
  if (value == divisor_value) return;
  divisor = at::scalar_tensor(static_cast<double>(value), at::TensorOptions().dtype(at::kDouble));
  divisor_value = value;
}

void DistributedDataParallel::Impl::on_grad_ready(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!sync) return;
  try {
    if (!armed) arm();
    if (options.static_graph) {
      ++fires[index];
      if (!static_recorded) return;  // the recorded pass reduces everything at its end
      if (fires[index] > expected[index]) {
        throw std::runtime_error(fmt::format(
            "DistributedDataParallel (static_graph): on rank {}, parameter {} got a gradient {} "
            "times in this backward pass but {} times in the first; static_graph needs the same "
            "graph in every iteration",
            comm->rank(), names[index], fires[index], expected[index]));
      }
      if (fires[index] == expected[index]) mark_ready(index);
      return;
    }
    if (ready[index]) {
      // Its bucket may already be on the wire with the first part of its gradient.
      throw std::runtime_error(fmt::format(
          "DistributedDataParallel: on rank {}, parameter {} got a second gradient in one backward "
          "pass (a reentrant backward, e.g. activation checkpointing, reaches it twice; or "
          "find_unused_parameters did not see it used). Construct the wrapper with "
          "DdpOptions::static_graph = true",
          comm->rank(), names[index]));
    }
    mark_ready(index);
  } catch (...) {
    // Autograd drops the queued finalize when backward fails; the next pass starts afresh.
    armed = false;
    throw;
  }
}

void DistributedDataParallel::Impl::arm() {
  // Before any bucket goes out: a rank that is not in a backward pass now (one more backward on
  // another rank, a reduce_mean here) gets an error naming both, not mixed-up buckets.
  backward_progress.reset();  // the last pass failed: it is over
  backward_progress.emplace("ddp_backward");  // beats
  comm->check_agreement(backward_call);
  armed = true;
  backward_seen = true;
  next_launch = 0;
  std::fill(ready.begin(), ready.end(), 0);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    buckets[b].pending = plan[b].params.size();
    buckets[b].op.reset();
    buckets[b].future.reset();
  }
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
  if (options.static_graph) {
    std::fill(fires.begin(), fires.end(), 0);
    if (static_recorded) {
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (expected[i] == 0) mark_ready(i);
      }
    }
  } else if (graph_walked) {
    // Parameters this pass will not reach count as ready now, so that their buckets do not
    // hold back every later bucket until the end of backward.
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (unreachable[i]) mark_ready(i);
    }
  }
}

void DistributedDataParallel::Impl::mark_ready(std::size_t index) {
  if (ready[index]) return;
  ready[index] = 1;
  at::Tensor& grad = params[index].mutable_grad();
  {
    at::NoGradGuard no_grad;
    if (!grad.defined()) {
      views[index].zero_();
    } else if (grad.is_sparse()) {
      throw std::runtime_error("DistributedDataParallel does not support sparse gradients (" +
                               names[index] + ")");
    } else if (options.gradient_as_bucket_view && is_bucket_view(grad, views[index])) {
      // AccumulateGrad has added this pass's gradient into the bucket itself. A comm hook
      // gets the sum and averages itself, as in PyTorch.
      if (!comm_hook) views[index].div_(divisor);
    } else {
      // Without a hook, dividing while copying into the bucket saves one pass over the
      // gradients; a hook gets the sum.
      if (comm_hook) {
        views[index].copy_(grad);
      } else {
        at::div_out(views[index], grad, divisor);
      }
      // From now on autograd accumulates straight into the bucket. (A new gradient tensor
      // appears again only after zero_grad(set_to_none) or when user code replaces .grad().)
      if (options.gradient_as_bucket_view) grad = views[index];
    }
  }
  if (--buckets[bucket_of[index]].pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::Impl::launch_ready_buckets() {
  // Strictly in plan order: every rank must issue the same all-reduces in the same order,
  // whatever order its gradients happened to become ready in.
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
    BucketState& bucket = buckets[next_launch];
    if (comm_hook) {
      GradBucket view{next_launch, bucket.flat, {}, next_launch + 1 == buckets.size()};
      for (std::size_t i : plan[next_launch].params) view.parameters.push_back(params[i]);
      bucket.future = std::make_unique<GradFuture>(comm_hook(*comm, view));
    } else {
      bucket.op = comm->start_all_reduce(bucket.flat, ReduceOp::kSum);
    }
    ++next_launch;
  }
}

void DistributedDataParallel::Impl::finalize() {
  std::lock_guard<std::mutex> lock(mutex);
  struct Disarm {
    Impl& impl;
    ~Disarm() {
      impl.armed = false;
      impl.graph_walked = false;
    }
  } disarm{*this};

  const bool recording = options.static_graph && !static_recorded;
  std::vector<std::string> missing;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!ready[i]) missing.push_back(names[i]);
  }
  if (!missing.empty() && options.static_graph && !recording) {
    std::string list;
    for (const auto& n : missing) list += (list.empty() ? "" : ", ") + n;
    throw std::runtime_error(fmt::format(
        "DistributedDataParallel (static_graph): on rank {}, {} parameter(s) got fewer gradients "
        "in this backward pass than in the first: {}; static_graph needs the same graph in every "
        "iteration", comm->rank(), missing.size(), list));
  }
  if (!missing.empty() && !options.find_unused_parameters && !options.static_graph) {
    std::string list;
    for (const auto& n : missing) list += (list.empty() ? "" : ", ") + n;
    throw std::runtime_error(fmt::format(
        "DistributedDataParallel: on rank {}, {} parameter(s) got no gradient in this backward "
        "pass: {}. If they are legitimately unused in some steps, construct it with "
        "DdpOptions::find_unused_parameters = true",
        comm->rank(), missing.size(), list));
  }
  for (std::size_t i = 0; i < params.size(); ++i) mark_ready(i);

  // Which parameters have a gradient on some rank. One that has none anywhere keeps an
  // undefined gradient, as in PyTorch, instead of gaining a zero one. With static_graph only
  // the recorded pass asks; later passes reach the same parameters.
  at::Tensor used;
  std::unique_ptr<PendingOp> used_op;
  if (options.find_unused_parameters || recording) {
    used = at::empty({static_cast<int64_t>(params.size())}, at::TensorOptions().dtype(at::kInt));
    auto* u = used.data_ptr<int32_t>();
    for (std::size_t i = 0; i < params.size(); ++i) {
      u[i] = (recording ? fires[i] > 0 : params[i].grad().defined()) ? 1 : 0;
    }
    used = used.to(comm->device());
    used_op = comm->start_all_reduce(used, ReduceOp::kMax);
  }
  for (auto& b : buckets) b.wait();
  // The step's communication is done: a step (and a beat), whatever comes next.
  backward_progress.reset();
  step();
  std::vector<char> keep_undefined(params.size(), 0);
  if (used_op) {
    used_op->wait();
    const at::Tensor u = used.cpu();
    for (std::size_t i = 0; i < params.size(); ++i) keep_undefined[i] = u.data_ptr<int32_t>()[i] == 0;
  }
  if (recording) {
    expected = fires;
    globally_unused = keep_undefined;
    static_recorded = true;
  } else if (options.static_graph) {
    keep_undefined = globally_unused;
  }

  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (keep_undefined[i]) continue;
    at::Tensor& grad = params[i].mutable_grad();
    if (options.gradient_as_bucket_view) {
      // Already the bucket, except for a parameter unused here but used on another rank.
      if (!is_bucket_view(grad, views[i])) grad = views[i];
    } else if (grad.defined()) {
      grad.copy_(views[i]);
    } else {
      grad = views[i].clone();
    }
  }
}

}  // namespace ddprun
