// Which autograd nodes DistributedDataParallel hooks, and which of them a pass will reach: a hook
// on each parameter's gradient accumulator, moved to the accumulator of whatever tensor the
// module holds before each forward pass, and the graph walk of find_unused_parameters.
#include <fmt/format.h>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "ddp_impl.hpp"

namespace ddprun {

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

}  // namespace

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

}  // namespace ddprun
