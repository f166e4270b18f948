// DistributedDataParallel: construction (every rank's model checked against rank 0's, rank 0's
// state broadcast, the bucket layout) and the public methods around a forward pass. The hooks
// and the module they follow are in ddp_graph.cpp, backward in ddp_reducer.cpp, uneven inputs in
// ddp_join.cpp; ddp_impl.hpp is the state they share.
#include "ddprun/ddp.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/function.h>

#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "ddp_impl.hpp"
#include "ddprun/collectives.hpp"
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

}  // namespace

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

torch::nn::Module& DistributedDataParallel::module() { return *impl_->module; }

Comm& DistributedDataParallel::comm() { return *impl_->comm; }

const std::vector<Bucket>& DistributedDataParallel::buckets() const { return impl_->plan; }

}  // namespace ddprun
