// rank_driver's training scenarios: train, compare, resume, hooks, hang (usage in rank_driver.cpp).
#include "rank_driver.hpp"

#include "driver_formulas.hpp"

namespace rank_driver {
namespace {

// Operations that give the module's parameters new storage (or new autograd state) with the
// same values, the ways user code does between steps.
void replace_parameters(const std::string& how, const std::shared_ptr<Net>& net,
                        torch::optim::Optimizer& opt, Comm& comm, const std::string& dir) {
  if (how == "checkpoint" || how == "checkpoint_set") {
    auto shared = std::shared_ptr<Comm>(&comm, [](Comm*) {});
    ddprun::Checkpointer checkpointer(dir + "/checkpoints", shared);
    checkpointer.save(1, *net, opt);
    checkpointer.load_latest(*net, opt);
  } else if (how == "torch_load") {
    const std::string file = dir + "/model." + std::to_string(comm.rank()) + ".pt";
    torch::save(net, file);
    torch::load(net, file);
  } else if (how == "set_data") {
    for (auto& p : net->parameters()) p.set_data(p.detach().clone());
  } else if (how == "set_") {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.set_(p.detach().clone());
  } else if (how == "to_double_and_back") {
    net->to(torch::kDouble);
    net->to(torch::kFloat);
  } else if (how == "to_double") {  // no longer fits the buckets: the next forward must refuse
    net->to(torch::kDouble);
  } else {
    die("unknown replacement: " + how);
  }
}

// With gradient_as_bucket_view every gradient of a bucket lives in that bucket's one tensor;
// without it every gradient has memory of its own.
void check_gradient_memory(const ddprun::DistributedDataParallel& ddp,
                           const std::vector<torch::Tensor>& params, bool copy_grads) {
  std::set<const void*> all;
  for (const auto& bucket : ddp.buckets()) {
    std::set<const void*> in_bucket;
    for (std::size_t i : bucket.params) {
      expect(params[i].grad().defined(), "every parameter has a gradient after backward");
      in_bucket.insert(params[i].grad().storage().data());
    }
    all.insert(in_bucket.begin(), in_bucket.end());
    if (!copy_grads) expect(in_bucket.size() == 1, "a bucket's gradients share the bucket's memory");
  }
  if (copy_grads) expect(all.size() == params.size(), "every gradient has memory of its own");
}

struct DropoutNet : torch::nn::Module {
  DropoutNet() {
    a = register_module("a", torch::nn::Linear(8, 16));
    drop = register_module("drop", torch::nn::Dropout(0.3));
    b = register_module("b", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return b->forward(drop->forward(torch::relu(a->forward(x)))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
  torch::nn::Dropout drop{nullptr};
};

}  // namespace

int train(const std::string& out, int total, int batch, int steps, TrainVariant variant) {
  auto comm = ddprun::init_process_group(variant.cuda_backend.empty()
                                             ? ddprun::ProcessGroupOptions{}
                                             : group_options("cuda", variant.cuda_backend));
  const int r = comm->rank();
  const int w = comm->size();
  expect(total % w == 0, "TOTAL must be a multiple of the world size");
  torch::manual_seed(1000 + r);  // each rank starts elsewhere: DDP must broadcast rank 0's model
  auto net = std::make_shared<Net>();
  if (r == 0) {
    torch::manual_seed(7);
    net = std::make_shared<Net>();
  }
  net->to(comm->device());
  ddprun::DdpOptions options;
  options.bucket_cap_mb = 0.0005;  // several buckets even for this small model
  options.first_bucket_cap_mb = 0.0002;
  options.gradient_as_bucket_view = !variant.copy_grads;
  ddprun::DistributedDataParallel ddp(net, comm, options);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  torch::manual_seed(3);
  const auto x = torch::randn({steps, total * batch, 8}).to(comm->device());
  const auto y = torch::randn({steps, total * batch, 4}).to(comm->device());
  const int64_t mine = total * batch / w;
  for (int s = 0; s < steps; ++s) {
    const auto xs = x[s].narrow(0, r * mine, mine);
    const auto ys = y[s].narrow(0, r * mine, mine);
    if (s == steps / 2 && !variant.replace.empty()) replace_parameters(variant.replace, net, opt, *comm, out);
    if (variant.set_to_none) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
    } else {
      opt.zero_grad();  // detach_() and zero_() on each gradient, bucket slices included
    }
    if (variant.nosync) {
      const int64_t half = mine / 2;
      {
        auto guard = ddp.no_sync();
        auto loss = torch::mse_loss(ddp.forward([&] { return net->forward(xs.narrow(0, 0, half)); }),
                                    ys.narrow(0, 0, half)) / 2;
        loss.backward();
      }
      auto loss = torch::mse_loss(ddp.forward([&] { return net->forward(xs.narrow(0, half, mine - half)); }),
                                  ys.narrow(0, half, mine - half)) / 2;
      loss.backward();
    } else {
      auto loss = torch::mse_loss(ddp.forward([&] { return net->forward(xs); }), ys);
      loss.backward();
    }
    if (w > 1) check_gradient_memory(ddp, net->parameters(), variant.copy_grads);
    opt.step();
  }
  write_file(out + "/params." + std::to_string(r), params_text(*net));
  return 0;
}

int compare(const std::string& a, const std::string& b, double tolerance) {
  std::ifstream fa(a), fb(b);
  double x, y, worst = 0;
  size_t n = 0;
  while (fa >> x) {
    if (!(fb >> y)) die("different lengths: " + a + " " + b);
    worst = std::max(worst, std::abs(x - y));
    ++n;
  }
  if (fb >> y) die("different lengths: " + a + " " + b);
  expect(n > 0, "no parameters in " + a);
  std::cout << "max |difference| over " << n << " parameters: " << worst << "\n";
  return worst <= tolerance ? 0 : 1;
}

// A run whose every piece of state matters for its outcome: dropout draws from each rank's own
// generator (seeded by rank), momentum lives in the optimizer, the learning rate follows a
// StepLR, the sampler's position moves within an epoch. A run resumed from a checkpoint must
// end bit-identical to one that never stopped.
int resume(const std::string& out, int steps, int save_at, bool load) {
  auto comm = ddprun::init_process_group();
  const int r = comm->rank();
  torch::manual_seed(11);
  auto net = std::make_shared<DropoutNet>();
  ddprun::DistributedDataParallel ddp(net, comm);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::StepLR scheduler(opt, /*step_size=*/3, /*gamma=*/0.5);
  torch::manual_seed(5);
  const auto data = torch::randn({40, 8});
  const auto target = torch::randn({40, 4});
  ddprun::DistributedSampler sampler({40, comm->size(), r, true, 3, false});
  torch::manual_seed(100 + r);  // after the data: each rank's dropout masks differ
  std::map<std::string, c10::IValue> extra{{"best_loss", 1e9}, {"config", std::string("lr=0.05")}};
  ddprun::Checkpointer checkpointer(out, comm);
  const ddprun::CheckpointItems items{net.get(), &opt, &scheduler, &sampler, true, &extra};
  int first = 0;
  if (load) {
    const auto step = checkpointer.load_latest(items);
    expect(step.has_value(), "a checkpoint to resume from");
    first = static_cast<int>(*step);
    std::ostringstream entries;
    entries << "step " << first << "\nbest_loss " << extra.at("best_loss").toDouble() << "\nconfig "
            << extra.at("config").toStringRef() << "\nlr " << opt.param_groups()[0].options().get_lr() << "\n";
    write_file(out + "/restored." + std::to_string(r), entries.str());
  } else {
    sampler.set_epoch(0);
    sampler.reset();
  }
  for (int step = first; step < steps; ++step) {
    auto batch = sampler.next(4);
    if (!batch) {
      sampler.set_epoch(sampler.epoch() + 1);
      sampler.reset();
      batch = sampler.next(4);
    }
    std::vector<int64_t> idx(batch->begin(), batch->end());
    const auto index = torch::tensor(idx);
    opt.zero_grad();
    auto loss = torch::mse_loss(ddp.forward([&] { return net->forward(data.index_select(0, index)); }),
                                target.index_select(0, index));
    loss.backward();
    opt.step();
    scheduler.step();
    auto mean = loss.detach().clone();
    ddprun::reduce_mean(*comm, mean);
    if (mean.item<double>() < extra.at("best_loss").toDouble()) extra["best_loss"] = mean.item<double>();
    if (step + 1 == save_at && !load) checkpointer.save(step + 1, items);
  }
  write_file(out + "/params." + std::to_string(r) + (load ? ".resumed" : ""), params_text(*net));
  return 0;
}

// The same model, weights and batches as tests/worker/hooks_reference.py builds in Python.
int hooks(const std::string& out, const std::string& hook, int steps) {
  auto comm = ddprun::init_process_group();
  const int r = comm->rank();
  auto net = torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::Tanh(), torch::nn::Linear(5, 3));
  driver_formulas::init_weights(*net);
  ddprun::DistributedDataParallel ddp(net.ptr(), comm);
  const std::map<std::string, std::function<ddprun::CommHook()>> hooks = {
      {"allreduce", ddprun::allreduce_hook},
      {"fp16", ddprun::fp16_compress_hook},
      {"bf16", ddprun::bf16_compress_hook},
      {"fp16_wrapper", [] { return ddprun::fp16_compress_wrapper(ddprun::allreduce_hook()); }},
      {"bf16_wrapper", [] { return ddprun::bf16_compress_wrapper(ddprun::allreduce_hook()); }},
  };
  if (hook != "none") ddp.register_comm_hook(hooks.at(hook)());
  torch::optim::SGD opt(net->parameters(), 0.1);
  for (int s = 0; s < steps; ++s) driver_formulas::step(ddp, net, opt, r, s, 6, 3);
  write_file(out + "/params." + std::to_string(r), params_text(*net));
  try {  // too late: after a backward pass, and (with HOOK) a second hook
    ddp.register_comm_hook(ddprun::allreduce_hook());
    die("register_comm_hook after a backward pass was accepted");
  } catch (const std::logic_error& e) {
    write_file(out + "/late." + std::to_string(r), e.what());
  }
  return 0;
}

// Where a hung rank is found: the name the summary's top frames must show. noinline, and a
// call in a loop, so that it keeps its own frame.
[[gnu::noinline]] void stuck_loading_batch() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

int hang(const std::string& out, int hang_at) {
  auto comm = ddprun::init_process_group();
  const int r = comm->rank();
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool first = attempt == nullptr || std::string(attempt) == "0";
  auto net = torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::Tanh(), torch::nn::Linear(5, 3));
  ddprun::DistributedDataParallel ddp(net.ptr(), comm);
  torch::optim::SGD opt(net->parameters(), 0.1);
  for (int s = 0; s < hang_at + 2; ++s) {
    if (first && r == 1 && s == hang_at) stuck_loading_batch();
    // Rank 0 goes on to the step in which rank 1 hangs only once rank 1 has finished the one
    // before, and with it beaten for the last time: rank 1 is then the rank silent longest
    // however the two are scheduled (without this, a rank 1 held off the CPU between its
    // all-reduce and its last beat was beaten to it by rank 0's next backward, and rank 0 was
    // taken for the root cause).
    if (first && r == 0 && s == hang_at) {
      while (!exists(out + "/step.1." + std::to_string(s - 1))) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const auto x = torch::randn({4, 6});
    opt.zero_grad();
    torch::mse_loss(ddp.forward([&] { return net->forward(x); }), torch::zeros({4, 3})).backward();
    opt.step();
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    write_file(out + "/lastbeat." + std::to_string(r), std::to_string(now));
    write_file(out + "/step." + std::to_string(r) + "." + std::to_string(s), "");
  }
  return 0;
}

}  // namespace rank_driver
