#include "ddprun/sync_batchnorm.hpp"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/nn/functional/batchnorm.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include "ddprun/collectives.hpp"

namespace ddprun {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Carries the communicator to the backward pass through autograd's saved data, which holds
// IValues only.
struct CommCapsule : torch::CustomClassHolder {
  explicit CommCapsule(std::shared_ptr<Comm> c) : comm(std::move(c)) {}
  std::shared_ptr<Comm> comm;
};

// Every dimension but the channels (1).
std::vector<int64_t> reduce_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against `x`: [1, C, 1, ...].
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}

// The statistics' dtype: PyTorch's kernels accumulate reduced-precision inputs in float.
at::ScalarType stats_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The running statistics to update, undefined where they are not kept. Not tensor arguments of
// the autograd function: libtorch 1.13 cannot take undefined ones.
struct RunningStats {
  at::Tensor mean;
  at::Tensor var;
};

// PyTorch's torch.nn.modules._functions.SyncBatchNorm, its CUDA-only kernels
// (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt,
// batch_norm_backward_reduce, batch_norm_backward_elemt) written as tensor operations.
struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  // weight and bias are optionals holding undefined tensors without affine parameters: the
  // autograd function then takes them as no input, which libtorch 1.13 needs (c10::optional is
  // std::optional in 2.x).
  static at::Tensor forward(AutogradContext* ctx, at::Tensor input, c10::optional<at::Tensor> weight_arg,
                            c10::optional<at::Tensor> bias_arg, RunningStats running, double eps, double momentum,
                            std::shared_ptr<Comm> comm) {
    input = input.contiguous();
    const at::Tensor weight = weight_arg.value_or(at::Tensor());
    const at::Tensor bias = bias_arg.value_or(at::Tensor());
    const int64_t channels = input.size(1);
    const at::ScalarType acc = stats_dtype(input);

    // This rank's mean, 1/sqrt(var + eps) and count. All-gathered rather than all-reduced, as
    // in PyTorch: the counts may differ. An empty batch contributes zeros, filtered out below.
    at::Tensor local;
    if (input.numel() > 0) {
      const std::vector<int64_t> dims = reduce_dims(input);
      const auto [var, mean] = at::var_mean(input.to(acc), at::IntArrayRef(dims), /*unbiased=*/false,
                                            /*keepdim=*/false);
      const double count = static_cast<double>(input.numel() / channels);
      local = at::cat({mean, (var + eps).rsqrt(), at::full({1}, count, mean.options())});
    } else {
      local = at::zeros({2 * channels + 1}, input.options().dtype(acc));
    }
    const at::Tensor all = at::stack(all_gather(*comm, local));
    const at::Tensor counts = all.select(1, 2 * channels).to(at::kCPU, at::kDouble).contiguous();

    // batch_norm_gather_stats_with_counts: Welford's merge of the ranks' statistics, in rank order.
    at::Tensor avg = at::zeros({channels}, all.options());
    at::Tensor var_n = at::zeros({channels}, all.options());
    double n = 0;
    for (int64_t j = 0; j < all.size(0); ++j) {
      const double count = counts.data_ptr<double>()[j];
      if (count < 1) continue;
      const at::Tensor m = all[j].narrow(0, 0, channels);
      at::Tensor v = all[j].narrow(0, channels, channels).reciprocal();
      v = (v * v - eps) * count;
      const double factor = 1.0 / (n + count);
      var_n = var_n + v + (avg - m) * (avg - m) * n * count * factor;
      avg = avg * (n * factor) + m * (count * factor);
      n += count;
    }
    const at::Tensor mean = avg;
    const at::Tensor invstd = (var_n / n + eps).rsqrt();
    if (running.mean.defined()) {
      running.mean.copy_(running.mean.to(acc) * (1 - momentum) + avg * momentum);
    }
    if (running.var.defined()) {
      running.var.copy_(running.var.to(acc) * (1 - momentum) + var_n / (n - 1) * momentum);
    }

    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = n;
    ctx->saved_data["comm"] = at::IValue::make_capsule(c10::make_intrusive<CommCapsule>(comm));

    // batch_norm_elemt.
    at::Tensor out = (input.to(acc) - per_channel(mean, input)) * per_channel(invstd, input);
    if (weight.defined()) out = out * per_channel(weight.to(acc), input);
    if (bias.defined()) out = out + per_channel(bias.to(acc), input);
    return out.to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double count = ctx->saved_data["count"].toDouble();
    const auto capsule = ctx->saved_data["comm"].toCapsule();
    Comm& comm = *static_cast<CommCapsule*>(capsule.get())->comm;
    const int64_t channels = input.size(1);
    const bool want_input = ctx->needs_input_grad(0);

    at::Tensor grad_input, grad_weight, grad_bias;
    if (input.numel() == 0) {
      // Nothing to differentiate here, but the other ranks' all-reduce needs this rank's part.
      if (want_input) {
        at::Tensor zeros = at::zeros({2 * channels}, mean.options());
        all_reduce(comm, zeros);
      }
      return {grad_input, grad_weight, grad_bias, {}, {}, {}, {}};
    }
    const at::ScalarType acc = mean.scalar_type();
    const std::vector<int64_t> dims = reduce_dims(input);
    const at::Tensor dy = grad_outputs[0].contiguous().to(acc);
    const at::Tensor xmu = input.to(acc) - per_channel(mean, input);

    // batch_norm_backward_reduce: this rank's sums, and the affine parameters' gradients, which
    // DDP then averages like any other.
    at::Tensor sum_dy = dy.sum(dims);
    at::Tensor sum_dy_xmu = (dy * xmu).sum(dims);
    if (weight.defined() && ctx->needs_input_grad(1)) grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
    if (weight.defined() && ctx->needs_input_grad(2)) grad_bias = sum_dy.to(weight.scalar_type());

    if (want_input) {
      at::Tensor sums = at::cat({sum_dy, sum_dy_xmu});
      all_reduce(comm, sums);
      sum_dy = sums.narrow(0, 0, channels);
      sum_dy_xmu = sums.narrow(0, channels, channels);

      // batch_norm_backward_elemt, normalised by the global count.
      const double norm = 1.0 / count;
      const at::Tensor grad_mean = sum_dy * norm;
      const at::Tensor proj_scale = invstd * invstd * sum_dy_xmu * norm;
      const at::Tensor grad_scale = weight.defined() ? invstd * weight.to(acc) : invstd;
      grad_input = ((dy - xmu * per_channel(proj_scale, input) - per_channel(grad_mean, input)) *
                    per_channel(grad_scale, input))
                       .to(input.scalar_type());
    }
    return {grad_input, grad_weight, grad_bias, {}, {}, {}, {}};
  }
};

}  // namespace

// Builds the SyncBatchNorm that takes a BatchNorm's place, around the BatchNorm's own tensors.
struct SyncBatchNormAccess {
  template <typename BatchNormImpl>
  static std::shared_ptr<SyncBatchNormImpl> adopt(const BatchNormImpl& bn, std::shared_ptr<Comm> comm) {
    std::shared_ptr<SyncBatchNormImpl> sync(new SyncBatchNormImpl(bn.options, std::move(comm), false));
    const auto requires_grad = [](const at::Tensor& t) { return t.defined() && t.requires_grad(); };
    sync->weight = sync->register_parameter("weight", bn.weight, requires_grad(bn.weight));
    sync->bias = sync->register_parameter("bias", bn.bias, requires_grad(bn.bias));
    sync->running_mean = sync->register_buffer("running_mean", bn.running_mean);
    sync->running_var = sync->register_buffer("running_var", bn.running_var);
    sync->num_batches_tracked = sync->register_buffer("num_batches_tracked", bn.num_batches_tracked);
    sync->train(bn.is_training());
    return sync;
  }

  static std::shared_ptr<SyncBatchNormImpl> from(const std::shared_ptr<torch::nn::Module>& m,
                                                 const std::shared_ptr<Comm>& comm) {
    if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(m)) return adopt(*bn, comm);
    if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(m)) return adopt(*bn, comm);
    if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm3dImpl>(m)) return adopt(*bn, comm);
    return nullptr;
  }
};

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, std::shared_ptr<Comm> comm)
    : SyncBatchNormImpl(options, std::move(comm), true) {}

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, std::shared_ptr<Comm> comm,
                                     bool make_tensors)
    : options(options), comm_(std::move(comm)) {
  if (!comm_) throw std::invalid_argument("SyncBatchNorm: the communicator is null");
  if (make_tensors) reset();
}

void SyncBatchNormImpl::reset() {
  // The tensors, names and initial values of libtorch's BatchNorm.
  const int64_t n = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", at::ones({n}));
    bias = register_parameter("bias", at::zeros({n}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", at::zeros({n}));
    running_var = register_buffer("running_var", at::ones({n}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "ddprun::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << std::boolalpha << options.affine()
         << ", track_running_stats=" << options.track_running_stats() << ")";
}

// torch.nn.SyncBatchNorm.forward: the same choice between the global batch's statistics, the
// local ones and the running ones, and the same momentum.
at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "SyncBatchNorm: expected an input of 2 or more dimensions, got ", input.dim());
  TORCH_CHECK(input.size(1) != 0, "SyncBatchNorm: the input has no channels (dimension 1 is 0)");
  double factor = options.momentum() ? *options.momentum() : 0.0;
  if (is_training() && options.track_running_stats()) {
    num_batches_tracked.add_(1);
    // No momentum: the cumulative average of all batches so far.
    factor = options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item<double>();
  }
  // Evaluation normalises with the running statistics where they are kept.
  const bool batch_stats = is_training() || (!running_mean.defined() && !running_var.defined());
  // The buffers go along to be updated (training, when kept) or to normalise with (evaluation).
  const bool pass_buffers = !is_training() || options.track_running_stats();
  const at::Tensor mean_buffer = pass_buffers ? running_mean : at::Tensor();
  const at::Tensor var_buffer = pass_buffers ? running_var : at::Tensor();
  if (!is_training() || comm_->size() < 2) {
    namespace F = torch::nn::functional;
    F::BatchNormFuncOptions local;
    local.weight(weight).bias(bias).training(batch_stats).momentum(factor).eps(options.eps());
    return F::batch_norm(input, mean_buffer, var_buffer, local);
  }
  return SyncBatchNormFunction::apply(input, c10::optional<at::Tensor>(weight), c10::optional<at::Tensor>(bias),
                                      RunningStats{mean_buffer, var_buffer}, options.eps(), factor, comm_);
}

std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(std::shared_ptr<torch::nn::Module> module,
                                                          std::shared_ptr<Comm> comm) {
  if (!module) throw std::invalid_argument("convert_sync_batchnorm: the module is null");
  if (!comm) throw std::invalid_argument("convert_sync_batchnorm: the communicator is null");
  if (auto sync = SyncBatchNormAccess::from(module, comm)) return sync;
  // Sequential and ModuleList keep their own list of the children, which forward() and
  // iteration use; it is kept in step with the registry, in the same order.
  auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(module.get());
  auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(module.get());
  std::size_t index = 0;
  for (const auto& child : module->named_children()) {
    const auto sync = SyncBatchNormAccess::from(child.value(), comm);
    if (!sync) {
      convert_sync_batchnorm(child.value(), comm);
      ++index;
      continue;
    }
    module->replace_module(child.key(), sync);
    if (sequential) {
      TORCH_INTERNAL_ASSERT(sequential->ptr(index) == child.value());
      *(sequential->begin() + index) = torch::nn::AnyModule(sync);
    }
    if (list) {
      TORCH_INTERNAL_ASSERT(list->ptr(index) == child.value());
      *(list->begin() + index) = sync;
    }
    ++index;
  }
  return module;
}

}  // namespace ddprun
