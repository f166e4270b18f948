// DistributedDataParallel for libtorch modules: every rank trains a replica of the model on its
// share of the data, and after each backward pass every replica holds the same averaged
// gradients, so the same optimizer step keeps the replicas bit-identical.
//
// Gradients are averaged in buckets (bucket_plan.hpp). Each bucket's all-reduce starts from an
// autograd hook the moment its last gradient is accumulated, so communication overlaps the
// rest of backward; the end of backward waits for all of them and writes the averages back.
//
//   auto comm = ddprun::init_process_group();
//   auto net = std::make_shared<Net>();
//   ddprun::DistributedDataParallel ddp(net, comm);
//   torch::optim::SGD opt(net->parameters(), 0.1);
//   auto out = ddp.forward([&] { return net->forward(x); });
//   loss_fn(out, y).backward();   // gradients are averaged over ranks here
//   opt.step();
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ddprun/bucket_plan.hpp"
#include "ddprun/comm.hpp"
#include "ddprun/comm_hook.hpp"
#include "ddprun/export.hpp"
#include "ddprun/join.hpp"

namespace ddprun {

struct DdpOptions {
  // Cap of every bucket after the first, in MiB (PyTorch's bucket_cap_mb).
  double bucket_cap_mb = kDefaultBucketCapMb;
  // Cap of the first bucket reduced, small so that communication starts early in backward.
  double first_bucket_cap_mb = kDefaultFirstBucketCapMb;
  // Allow parameters that get no gradient in a backward pass. Each forward then walks the
  // autograd graph to find them; their share of the average is zero. A parameter that no rank
  // used keeps an undefined gradient on every rank, as in PyTorch. Without this option such
  // a parameter makes backward() throw, naming it.
  bool find_unused_parameters = false;
  // Copy rank 0's buffers (e.g. BatchNorm running statistics) to every rank before each forward
  // pass run with gradients enabled. Forward passes under NoGradGuard (evaluation) skip it, so
  // evaluating on some ranks only cannot hang.
  bool broadcast_buffers = true;
  // Make every parameter's .grad() a slice of its bucket (PyTorch's gradient_as_bucket_view,
  // which is off there by default). Autograd then accumulates straight into the bucket: no copy
  // into the bucket before the all-reduce, none back after it, and no second 4-bytes-a-parameter
  // copy of the gradients in memory. Nothing changes for code that reads, scales or zeroes
  // .grad() in place, or sets it to none (the next backward pass restores the slice). Turn it off
  // only if your code needs .grad() to be a tensor of its own, e.g. to keep it across steps
  // while DDP overwrites the bucket.
  bool gradient_as_bucket_view = true;
  // Promise that every synchronised backward pass reaches the same parameters, the same number
  // of times, as the first (PyTorch's static_graph). The first such pass is recorded: which
  // parameters get a gradient and how many times each (a parameter inside a reentrant backward,
  // e.g. activation checkpointing, that is also used outside it gets two), and all its buckets
  // are reduced at its end. From then on no graph walk is needed: parameters unused in the
  // first pass count as ready at once (a zero share; undefined where no rank used them), and a
  // bucket goes out when each of its gradients has arrived as often as recorded. A pass that
  // differs (a parameter reached more or fewer times) throws, naming it. Buckets keep their
  // first order (PyTorch may rebuild them in hook order; the results are the same).
  bool static_graph = false;
};

// A Joinable (join.hpp): inside a ddprun::Join, ranks with fewer batches shadow the others'
// buffer broadcasts and gradient all-reduces with zeros, and the last rank to join hands its
// model to all at the end, as PyTorch's DDP does under torch.distributed.algorithms.Join.
class DDPRUN_API DistributedDataParallel : public Joinable {
 public:
  // Collective. Checks that every rank has the same parameter names, dtypes and shapes (throws
  // std::runtime_error naming the first mismatch and the rank), copies rank 0's parameters and
  // buffers to every rank, and hooks every parameter that requires a gradient.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Comm> comm,
                          DdpOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Runs one forward pass, `run()`, with DDP's work around it: buffers are broadcast before,
  // unused parameters found after. Inside an enabled Join it first tells the Join that this rank
  // still trains (and may throw: JoinOptions::throw_on_early_termination). `run` returns a tensor, a vector or a tuple of tensors.
  template <typename Run>
  auto forward(Run&& run) -> decltype(run()) {
    before_forward();
    auto out = std::forward<Run>(run)();
    std::vector<at::Tensor> tensors;
    collect_tensors(out, tensors);
    after_forward(tensors);
    return out;
  }
  // The two halves of forward(), for code that cannot wrap its forward pass in a callable.
  void before_forward();
  void after_forward(const std::vector<at::Tensor>& outputs);

  // While a NoSync is alive, backward passes only accumulate gradients locally; the first
  // backward after it averages everything accumulated (PyTorch's no_sync()).
  class NoSync {
   public:
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    friend class DistributedDataParallel;
    NoSync(DistributedDataParallel& ddp);
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync();

  // Reduces each bucket with `hook` instead of the built-in average (comm_hook.hpp), as
  // PyTorch's register_comm_hook. One hook per wrapper, registered before the first backward
  // pass; otherwise throws std::logic_error saying so.
  void register_comm_hook(CommHook hook);

  torch::nn::Module& module();
  Comm& comm();
  // The buckets in reduction order; indices refer to the parameters that require a gradient,
  // in registration order.
  const std::vector<Bucket>& buckets() const;

  // Joinable. The hook shadows one iteration: the buffer broadcast (with broadcast_buffers), then
  // one all-reduce of zeros per bucket in reduction order (through the comm hook, if any) when
  // the training ranks synchronise gradients in that iteration; its post hook broadcasts every
  // parameter and buffer from the highest-ranked of the last ranks to join. Under a Join, buffers
  // come from the highest-ranked rank still training instead of rank 0.
  std::unique_ptr<JoinHook> join_hook(const JoinOptions& options) override;
  Comm& join_comm() override;

 private:
  static void collect_tensors(const at::Tensor& t, std::vector<at::Tensor>& out) {
    out.push_back(t);
  }
  static void collect_tensors(const std::vector<at::Tensor>& ts, std::vector<at::Tensor>& out) {
    out.insert(out.end(), ts.begin(), ts.end());
  }
  template <typename... Ts>
  static void collect_tensors(const std::tuple<Ts...>& t, std::vector<at::Tensor>& out) {
    std::apply([&](const auto&... e) { (collect_tensors(e, out), ...); }, t);
  }

  void set_sync(bool enabled);
  bool sync_enabled() const;

  struct DDPRUN_NO_EXPORT Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun
