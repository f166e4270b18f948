// One rank of tests/worker/syncbn_test.sh, started by ddprun: DDP training of a small model with
// BatchNorm2d and BatchNorm1d layers (one without affine parameters and with the cumulative
// average, one that keeps no running statistics), 2 ranks with batches of different sizes
// (3 and 5 samples). Weights and data come from formulas that syncbn_reference.py repeats.
//
//   syncbn_driver OUT STEPS sync|plain
//     sync: the BatchNorms converted with convert_sync_batchnorm; plain: left as they are
//   Writes OUT/state.<rank> (parameters then buffers, %.17g, one a line), OUT/eval.<rank> (the
//   model's output in evaluation mode on a fixed batch), OUT/empty_peer.<rank> (then, in
//   training mode: the output on that batch on rank 0 while rank 1's batch is empty) and
//   OUT/collectives.<rank> (how many collectives one training and one evaluation forward pass
//   of the model started).
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "ddprun/ddp.hpp"
#include "ddprun/process_group.hpp"
#include "ddprun/sync_batchnorm.hpp"
#include "driver_formulas.hpp"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::cerr << "syncbn_driver: " << what << "\n";
  std::exit(1);
}

void expect(bool ok, const std::string& what) {
  if (!ok) die("check failed: " + what);
}

// Passes everything through to a real communicator and counts the collectives started.
class CountingComm : public ddprun::Comm {
 public:
  explicit CountingComm(std::shared_ptr<ddprun::Comm> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  c10::Device device() const override { return inner_->device(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  std::unique_ptr<ddprun::PendingOp> start_all_reduce(at::Tensor flat, ddprun::ReduceOp op) override {
    ++started;
    return inner_->start_all_reduce(flat, op);
  }
  void broadcast(at::Tensor flat, int root) override {
    ++started;
    inner_->broadcast(flat, root);
  }
  std::vector<at::Tensor> all_gather(const at::Tensor& flat) override {
    ++started;
    return inner_->all_gather(flat);
  }
  void barrier() override {
    ++started;
    inner_->barrier();
  }
  void check_agreement(const ddprun::CollectiveCall& call) override { inner_->check_agreement(call); }
  bool healthy() const override { return inner_->healthy(); }

  int started = 0;

 private:
  std::shared_ptr<ddprun::Comm> inner_;
};

std::string text_of(const std::vector<at::Tensor>& tensors) {
  std::ostringstream os;
  for (const auto& t : tensors) {
    const auto flat = t.detach().to(torch::kDouble).flatten();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      char line[64];
      std::snprintf(line, sizeof line, "%.17g\n", flat[i].item<double>());
      os << line;
    }
  }
  return os.str();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A module that reaches its BatchNorm through a Sequential member, which the conversion changes
// in place. (Sequential cannot hold a Sequential: its forward() is a template.)
struct Block : torch::nn::Module {
  Block() {
    namespace nn = torch::nn;
    layers = register_module(
        "layers", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU()));
  }
  torch::Tensor forward(const torch::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};

int run(const std::string& out, int steps, bool sync) {
  auto comm = std::make_shared<CountingComm>(ddprun::init_process_group());
  const int r = comm->rank();
  namespace nn = torch::nn;
  auto net = nn::Sequential(
      std::make_shared<Block>(), nn::Flatten(), nn::Linear(100, 6),
      nn::BatchNorm1d(nn::BatchNormOptions(6).affine(false).momentum(c10::nullopt)), nn::Tanh(),
      nn::Linear(6, 3), nn::BatchNorm1d(nn::BatchNormOptions(3).momentum(0.3).track_running_stats(false)));
  net->to(torch::kDouble);
  driver_formulas::init_weights(*net, torch::kDouble);
  // Made before the conversion: the converted layers must keep the very same parameters.
  torch::optim::SGD opt(net->parameters(), 0.1);
  if (sync) {
    const auto root = ddprun::convert_sync_batchnorm(nn::BatchNorm2d(2).ptr(), comm);
    expect(std::dynamic_pointer_cast<ddprun::SyncBatchNormImpl>(root) != nullptr, "a BatchNorm root is converted");
    const auto& layers = net->ptr(0)->as<Block>()->layers;
    const auto weight = layers->ptr(1)->named_parameters()["weight"];
    const auto modules = net->named_modules().size();
    expect(ddprun::convert_sync_batchnorm(net.ptr(), comm) == net.ptr(), "a Sequential is converted in place");
    const auto converted = layers->ptr(1);
    expect(converted->as<ddprun::SyncBatchNormImpl>() != nullptr, "the nested BatchNorm2d is converted");
    expect(converted->named_parameters()["weight"].is_same(weight), "the converted layer keeps the weight");
    expect(net->named_modules().size() == modules, "the module tree keeps its shape");
  }
  const int64_t batch = 3 + 2 * r;
  {
    // Gone before the collectives are counted below: its hooks would add the gradients' ones.
    ddprun::DistributedDataParallel ddp(net.ptr(), comm);
    for (int s = 0; s < steps; ++s) {
      const auto x = torch::cos(torch::arange(batch * 75, torch::kDouble) * 0.37 + (r * 1.3 + s * 0.11))
                         .reshape({batch, 3, 5, 5});
      const auto y = torch::sin(torch::arange(batch * 3, torch::kDouble) * 0.21 + (r * 0.9 + s * 0.05))
                         .reshape({batch, 3});
      opt.zero_grad();
      torch::mse_loss(ddp.forward([&] { return net->forward(x); }), y).backward();
      opt.step();
    }
  }
  auto state = net->parameters();
  for (const auto& b : net->buffers()) state.push_back(b);
  write_file(out + "/state." + std::to_string(r), text_of(state));

  const auto probe = torch::cos(torch::arange(150, torch::kDouble) * 0.5).reshape({2, 3, 5, 5});
  net->eval();
  int before = comm->started;
  at::Tensor evaluated;
  {
    torch::NoGradGuard no_grad;
    evaluated = net->forward(probe);
  }
  const int eval_collectives = comm->started - before;
  write_file(out + "/eval." + std::to_string(r), text_of({evaluated}));

  // Rank 1 brings an empty batch: rank 0's is the global batch.
  net->train();
  const auto part = net->forward(r == 0 ? probe : probe.narrow(0, 0, 0));
  part.sum().backward();
  write_file(out + "/empty_peer." + std::to_string(r), text_of({part}));

  before = comm->started;
  net->forward(probe).sum().backward();
  const int train_collectives = comm->started - before;
  write_file(out + "/collectives." + std::to_string(r),
             "train " + std::to_string(train_collectives) + "\neval " + std::to_string(eval_collectives) + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc == 4 ? argv[3] : "";
    if (mode == "sync" || mode == "plain") return run(argv[1], std::stoi(argv[2]), mode == "sync");
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("usage: syncbn_driver OUT STEPS sync|plain");
}
