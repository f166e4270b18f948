#include "ddprun/ddp.hpp"

#include <fmt/format.h>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unordered_set>

#include "ddprun/collectives.hpp"
#include "ddprun/heartbeat.hpp"
#include "param_signature.hpp"

namespace ddprun {

namespace {

std::string describe(const std::string& name, const at::Tensor& t, const char* kind) {
  std::ostringstream out;
  out << kind << ' ' << name << ": " << t.scalar_type() << ' ' << t.sizes();
  if (!t.requires_grad() && std::string(kind) == "param") out << " frozen";
  return out.str();
}

// A tensor on `flat`'s memory from element `offset`, contiguous, shaped like `like`. Made with
// set_() rather than narrow().view(): a view carries autograd view metadata, and libtorch's
// Optimizer::zero_grad() calls detach_() on every gradient, which views refuse.
at::Tensor alias_into(const at::Tensor& flat, int64_t offset, const at::Tensor& like) {
  at::NoGradGuard no_grad;
  return at::empty({0}, flat.options()).set_(flat.storage(), flat.storage_offset() + offset,
                                             like.sizes());
}

// Whether `grad` is exactly `view`'s memory (a gradient DDP pointed at its bucket, still there).
bool is_bucket_view(const at::Tensor& grad, const at::Tensor& view) {
  return grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides() && grad.scalar_type() == view.scalar_type();
}

}  // namespace

struct DDPRUN_NO_EXPORT DistributedDataParallel::Impl {
  struct BucketState {
    at::Tensor flat;
    std::size_t pending = 0;
    std::unique_ptr<PendingOp> op;          // without a comm hook
    std::unique_ptr<GradFuture> future;     // with one

    // The reduced bucket, in `flat`.
    void wait() {
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

  void install_hooks();
  void hook(std::size_t index, std::shared_ptr<torch::autograd::Node> accumulator);
  void follow_module();
  void on_grad_ready(std::size_t index);
  void arm();
  void mark_ready(std::size_t index);
  void launch_ready_buckets();
  void finalize();
  void walk_graph(const std::vector<at::Tensor>& outputs);
  void arm_at_outputs(const std::vector<at::Tensor>& outputs);
  void set_divisor(int value);

  // Join: the training rank's side, then the joined rank's.
  void join_before_forward();
  int find_common_rank(bool candidate);
  void shadow_iteration();
  void shadow_backward();
  void sync_final_model(bool is_last_joiner);
};

namespace {

class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    // AccumulateGrad has run: the parameter's .grad() holds this pass's accumulated value.
    on_ready_();
    return outputs;
  }

 private:
  std::function<void()> on_ready_;
};

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

void DistributedDataParallel::Impl::install_hooks() {
  accumulators.resize(params.size());
  hook_keys.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) hook(i, torch::autograd::impl::grad_accumulator(params[i]));
}

void DistributedDataParallel::Impl::hook(std::size_t i, std::shared_ptr<torch::autograd::Node> accumulator) {
  if (accumulators[i]) accumulators[i]->del_post_hook(hook_keys[i]);
  hook_keys[i] = accumulator->add_post_hook(std::make_unique<GradReadyHook>([this, i] { on_grad_ready(i); }));
  accumulators[i] = std::move(accumulator);
}

// libtorch replaces parameters in ways that drop the autograd node our hook sits on: Tensor::set_()
// (which Module::load() and torch::load() use), set_data() with another dtype, Module::to(). Backward then accumulates into a new node that nobody hooked, and
// without this check every rank would go on stepping with its own local gradients, silently.
// So before each forward pass: the same parameters (names, dtypes, shapes, devices) must still be
// there, and every parameter's current gradient accumulator gets our hook.
void DistributedDataParallel::Impl::follow_module() {
  std::vector<at::Tensor> now_params;
  std::vector<std::string> now_names;
  for (const auto& item : module->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    now_params.push_back(item.value());
    now_names.push_back(item.key());
  }
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error(fmt::format(
        "DistributedDataParallel on rank {}: {} since the wrapper was constructed; its buckets no "
        "longer fit the model. Convert, move or restructure the model first, then construct "
        "DistributedDataParallel (loading values into the same parameters is fine)",
        comm->rank(), what));
  };
  if (now_names != names) {
    fail(fmt::format("the module's trainable parameters changed from {} to {} tensors (or were "
                     "renamed, frozen or unfrozen)", names.size(), now_names.size()));
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = now_params[i];
    const at::Tensor& slot = views[i];
    if (p.scalar_type() != slot.scalar_type() || p.device() != slot.device() || p.sizes() != slot.sizes()) {
      std::ostringstream was, is;
      was << slot.scalar_type() << ' ' << slot.sizes() << " on " << slot.device();
      is << p.scalar_type() << ' ' << p.sizes() << " on " << p.device();
      fail(fmt::format("parameter {} became {} (was {})", names[i], is.str(), was.str()));
    }
    params[i] = p;  // the module may hold a new tensor under the same name
    auto accumulator = torch::autograd::impl::try_get_grad_accumulator(p);
    if (accumulator != accumulators[i]) {
      // None yet (the old one was dropped): make the one the next forward pass will use.
      hook(i, accumulator ? std::move(accumulator) : torch::autograd::impl::grad_accumulator(p));
    }
  }
  buffers.clear();
  for (const auto& item : module->named_buffers(/*recurse=*/true)) buffers.push_back(item.value());
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
  heartbeat();
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
  heartbeat();  // the step's communication is done: progress, whatever comes next
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

void DistributedDataParallel::Impl::walk_graph(const std::vector<at::Tensor>& outputs) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  auto visit = [&](const std::shared_ptr<torch::autograd::Node>& node) {
    if (node && seen.insert(node.get()).second) stack.push_back(node.get());
  };
  for (const auto& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    visit(t.grad_fn() ? t.grad_fn() : torch::autograd::impl::try_get_grad_accumulator(t));
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) visit(edge.function);
  }
  std::lock_guard<std::mutex> lock(mutex);
  for (std::size_t i = 0; i < params.size(); ++i) {
    unreachable[i] = seen.count(accumulators[i].get()) == 0;
  }
  graph_walked = true;
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<Comm> comm, DdpOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.owner = this;
  s.module = std::move(module);
  s.comm = std::move(comm);
  s.options = options;
  s.world = s.comm->size();

  ParamSignature signature;
  std::vector<at::Tensor> state;  // everything rank 0 hands out: all parameters, all buffers
  for (const auto& item : s.module->named_parameters(/*recurse=*/true)) {
    signature.push_back(describe(item.key(), item.value(), "param"));
    state.push_back(item.value());
    if (item.value().requires_grad()) {
      s.params.push_back(item.value());
      s.names.push_back(item.key());
    }
  }
  for (const auto& item : s.module->named_buffers(/*recurse=*/true)) {
    signature.push_back(describe(item.key(), item.value(), "buffer"));
    state.push_back(item.value());
    s.buffers.push_back(item.value());
  }
  // With one rank there is nothing to average: DDP is then a no-op, with no hooks.
  if (s.world == 1) return;

  const auto signatures = all_gather_bytes(*s.comm, encode_signature(signature));
  const ParamSignature rank0 = decode_signature(signatures[0]);
  for (std::size_t r = 1; r < signatures.size(); ++r) {
    if (auto mismatch = first_param_mismatch(rank0, decode_signature(signatures[r]),
                                             static_cast<int>(r))) {
      throw std::runtime_error("DistributedDataParallel: the model differs across ranks: " +
                               *mismatch);
    }
  }
  broadcast_tensors(*s.comm, state, 0);

  std::map<std::tuple<int, int, int>, int> groups;
  std::vector<ParamSlot> slots;
  for (const auto& p : s.params) {
    const auto key = std::make_tuple(static_cast<int>(p.scalar_type()),
                                     static_cast<int>(p.device().type()), p.device().index());
    const int group = groups.emplace(key, static_cast<int>(groups.size())).first->second;
    slots.push_back({p.nbytes(), group});
  }
  s.plan = plan_buckets(slots, megabytes_to_bytes(options.first_bucket_cap_mb),
                        megabytes_to_bytes(options.bucket_cap_mb));
  s.buckets.resize(s.plan.size());
  s.bucket_of.resize(s.params.size());
  s.views.resize(s.params.size());
  for (std::size_t b = 0; b < s.plan.size(); ++b) {
    int64_t numel = 0;
    for (std::size_t i : s.plan[b].params) numel += s.params[i].numel();
    const at::Tensor& first = s.params[s.plan[b].params.front()];
    s.buckets[b].flat = at::zeros({numel}, first.options().requires_grad(false));
    int64_t offset = 0;
    for (std::size_t i : s.plan[b].params) {
      s.bucket_of[i] = b;
      s.views[i] = alias_into(s.buckets[b].flat, offset, s.params[i]);
      offset += s.params[i].numel();
      at::Tensor& grad = s.params[i].mutable_grad();
      if (options.gradient_as_bucket_view && grad.defined() && !grad.is_sparse()) {
        at::NoGradGuard no_grad;
        s.views[i].copy_(grad);
        grad = s.views[i];
      }
    }
  }
  s.set_divisor(s.world);
  s.backward_call.kind = CollectiveKind::kDdpBackward;
  for (const auto& b : s.buckets) s.backward_call.numel += b.flat.numel();
  if (!s.buckets.empty()) s.backward_call.dtype = s.buckets.front().flat.scalar_type();
  s.backward_call.detail = static_cast<int64_t>(s.buckets.size());
  s.ready.assign(s.params.size(), 0);
  s.unreachable.assign(s.params.size(), 0);
  s.fires.assign(s.params.size(), 0);
  s.install_hooks();
}

DistributedDataParallel::~DistributedDataParallel() {
  for (std::size_t i = 0; i < impl_->hook_keys.size(); ++i) {
    impl_->accumulators[i]->del_post_hook(impl_->hook_keys[i]);
  }
}

void DistributedDataParallel::before_forward() {
  Impl& s = *impl_;
  if (s.world == 1) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.follow_module();
  }
  if (join_config().enable) {
    s.join_before_forward();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.set_divisor(s.world);
  }
  if (!s.options.broadcast_buffers || s.buffers.empty()) return;
  if (!at::GradMode::is_enabled()) return;
  broadcast_tensors(*s.comm, s.buffers, 0);
}

void DistributedDataParallel::after_forward(const std::vector<at::Tensor>& outputs) {
  Impl& s = *impl_;
  if (s.world == 1) return;
  const bool syncing = at::GradMode::is_enabled() && sync_enabled();
  s.require_forward_param_sync = syncing;
  if (!syncing) return;
  s.arm_at_outputs(outputs);
  if (s.options.find_unused_parameters && !s.options.static_graph) s.walk_graph(outputs);
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.sync_enabled()) {
  ddp_.set_sync(false);
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.set_sync(previous_); }

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() { return NoSync(*this); }

void DistributedDataParallel::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->sync = enabled;
}

bool DistributedDataParallel::sync_enabled() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->sync;
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (!hook) throw std::logic_error("DistributedDataParallel::register_comm_hook: the hook is empty");
  if (impl_->comm_hook) {
    throw std::logic_error(
        "DistributedDataParallel::register_comm_hook: a hook is already registered; a wrapper takes "
        "one, registered once (compose hooks inside it, e.g. fp16_compress_wrapper(hook))");
  }
  if (impl_->backward_seen) {
    throw std::logic_error(
        "DistributedDataParallel::register_comm_hook: register the hook before the first backward "
        "pass, right after constructing the wrapper");
  }
  impl_->comm_hook = std::move(hook);
}

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

torch::nn::Module& DistributedDataParallel::module() { return *impl_->module; }

Comm& DistributedDataParallel::comm() { return *impl_->comm; }

const std::vector<Bucket>& DistributedDataParallel::buckets() const { return impl_->plan; }

}  // namespace ddprun
