// One rank of a worker-library test, started by ddprun (or alone, as world size 1).
//
//   rank_driver collectives OUT [DEVICE BACKEND]
//                                          every collective's result, checked on every rank;
//                                          DEVICE cpu|cuda, BACKEND auto|gloo|nccl (cuda: a real
//                                          process group even at world size 1)
//   rank_driver cuda_devices               prints how many GPUs this libtorch sees, and whether
//                                          it is a CUDA build ("2 cuda-build", "0 cpu-build")
//   rank_driver train OUT TOTAL B STEPS [nosync] [copy_grads] [set_to_none] [replace=HOW]
//                                          SGD on a global batch of TOTAL*B split over the ranks;
//                                          writes OUT/params.<rank>. nosync: half of each batch
//                                          under no_sync(); copy_grads: gradient_as_bucket_view
//                                          off; set_to_none: gradients reset, not zeroed;
//                                          replace: halfway, every rank gives the parameters
//                                          new storage (see replace_parameters); cuda: on the
//                                          GPUs (NCCL); cuda_gloo: on the GPU(s) with gloo
//                                          (ranks may share a GPU)
//   rank_driver compare A B TOL            max |A-B| of two params files; fails above TOL
//   rank_driver peer_dies OUT              rank 1 is SIGKILLed during an all_reduce; rank 0
//                                          writes what it caught and after how long
//   rank_driver peer_hangs OUT [DEVICE BACKEND]
//                                          rank 1 never joins; rank 0 writes what it caught
//                                          (on cuda, of a barrier)
//   rank_driver mismatch OUT               rank 1's model differs; every rank writes the error
//   rank_driver extra_backward             DDP training in which rank 0 runs one backward more
//                                          than the others in step 3; reduce_mean of the loss
//                                          after each step (run under run_main: error file)
//   rank_driver last_words                 prints a line with printf and std::cout, then dies
//                                          of SIGKILL (nothing flushed by hand)
//   rank_driver resume OUT STEPS SAVE_AT [LOAD]
//                                          STEPS steps of training with dropout, momentum, a
//                                          StepLR, a sampler and extra entries, saving a
//                                          checkpoint in OUT after SAVE_AT; with LOAD, first
//                                          resumes from OUT's checkpoint; writes OUT/params.<rank>
//                                          (.resumed with LOAD) and the restored entries
//   rank_driver hooks OUT HOOK STEPS       STEPS of SGD on a small model with the communication
//                                          hook HOOK (none, allreduce, fp16, bf16, fp16_wrapper,
//                                          bf16_wrapper: the wrappers around allreduce); weights
//                                          and data from formulas that hooks_reference.py repeats
//                                          in Python; writes OUT/params.<rank>, and OUT/late.<rank>:
//                                          the error of registering a hook after training
//   rank_driver hang OUT HANG_AT           DDP training; on the first attempt rank 1 stops in
//                                          step HANG_AT inside stuck_loading_batch() while the
//                                          others wait in the next backward's all-reduce; after
//                                          each step every rank writes OUT/lastbeat.<rank> (the
//                                          time its last heartbeat was due) and OUT/step.<rank>.<s>,
//                                          and rank 0 starts step HANG_AT after rank 1's step
//                                          HANG_AT-1; on a restart all ranks train HANG_AT+2 steps
//                                          and exit 0
//   rank_driver sampler                    reads "N W SEED EPOCH DROP_LAST SHUFFLE" lines, prints
//                                          each rank's indices as torch's DistributedSampler would
//   rank_driver store_ops OUT              (2 ranks) every call of libtorch's c10d::TCPStore client
//                                          against the store at MASTER_ADDR:MASTER_PORT (the
//                                          launcher's): the 1.x API with watchKey on libtorch 1.x,
//                                          the extended API on 2.x; writes OUT/store_ops.<rank>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include "ddprun/checkpoint.hpp"
#include "ddprun/collectives.hpp"
#include "ddprun/ddp.hpp"
#include "ddprun/distributed_sampler.hpp"
#include "ddprun/error_file.hpp"
#include "ddprun/launch_env.hpp"
#include "ddprun/process_group.hpp"

namespace {

using ddprun::Comm;

[[noreturn]] void die(const std::string& what) {
  std::cerr << "rank_driver: " << what << "\n";
  std::exit(1);
}

void expect(bool ok, const std::string& what) {
  if (!ok) die("check failed: " + what);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// DEVICE and BACKEND as on the command line: "cpu"/"cuda" and "auto"/"gloo"/"nccl". On cuda the
// process group is a real one even at world size 1, so that a backend can be tested on one GPU.
ddprun::ProcessGroupOptions group_options(const std::string& device, const std::string& backend) {
  ddprun::ProcessGroupOptions options;
  if (device == "cuda") {
    options.device = c10::kCUDA;
    options.solo_when_alone = false;
  } else if (device != "cpu") {
    die("unknown device " + device);
  }
  if (backend == "gloo") {
    options.backend = ddprun::Backend::kGloo;
  } else if (backend == "nccl") {
    options.backend = ddprun::Backend::kNccl;
  } else if (backend != "auto") {
    die("unknown backend " + backend);
  }
  return options;
}

int collectives(const std::string& out, const ddprun::ProcessGroupOptions& options) {
  auto comm = ddprun::init_process_group(options);
  const int r = comm->rank();
  const int w = comm->size();
  const auto on = [&](torch::Tensor t) { return t.to(comm->device()); };
  const auto same = [](const torch::Tensor& a, const torch::Tensor& b) { return torch::equal(a.cpu(), b.cpu()); };
  auto t = on(torch::tensor({double(r + 1), double(-r), 2.0 * r}));
  ddprun::all_reduce(*comm, t, ddprun::ReduceOp::kSum);
  expect(t[0].item<double>() == w * (w + 1) / 2.0, "all_reduce sum");
  auto mn = on(torch::tensor({double(r)}));
  ddprun::all_reduce(*comm, mn, ddprun::ReduceOp::kMin);
  expect(mn.item<double>() == 0, "all_reduce min");
  auto mx = on(torch::tensor({double(r)}));
  ddprun::all_reduce(*comm, mx, ddprun::ReduceOp::kMax);
  expect(mx.item<double>() == w - 1, "all_reduce max");
  auto mean = on(torch::full({2, 3}, double(r)));
  ddprun::reduce_mean(*comm, mean);
  expect(torch::allclose(mean.cpu(), torch::full({2, 3}, (w - 1) / 2.0)), "reduce_mean");
  auto strided = on(torch::arange(12, torch::kFloat).reshape({3, 4})).t() * (r + 1);  // not contiguous
  ddprun::all_reduce(*comm, strided);
  expect(same(strided, torch::arange(12, torch::kFloat).reshape({3, 4}).t() * (w * (w + 1) / 2)),
         "all_reduce of a non-contiguous tensor");
  // Over 2 MiB, so gloo reduces it in parts (gloo_comm.cpp); of odd length, so they differ.
  const auto ramp = torch::arange((int64_t{1} << 19) + 1, torch::kDouble);  // 4 MiB + 8 bytes
  auto big = on(ramp * (r + 1));
  ddprun::all_reduce(*comm, big);
  expect(same(big, ramp * (w * (w + 1) / 2)), "all_reduce of a tensor reduced in parts");
  auto b = on(torch::full({4}, double(r == 1 % w ? 42 : r)));
  ddprun::broadcast(*comm, b, 1 % w);
  expect(same(b, torch::full({4}, 42.0, torch::kDouble)), "broadcast from rank 1");
  const auto gathered = ddprun::all_gather(*comm, on(torch::full({2}, r, torch::kLong)));
  expect(static_cast<int>(gathered.size()) == w, "all_gather size");
  for (int i = 0; i < w; ++i) expect(same(gathered[i], torch::full({2}, i, torch::kLong)), "all_gather");
  const auto names = ddprun::all_gather_bytes(*comm, std::string(r + 1, char('a' + r)));
  for (int i = 0; i < w; ++i) expect(names[i] == std::string(i + 1, char('a' + i)), "all_gather_bytes");
  ddprun::barrier(*comm);
  write_file(out + "/collectives." + std::to_string(r), comm->backend() + " " + std::to_string(w) + "\n");
  return 0;
}

struct Net : torch::nn::Module {
  explicit Net(int hidden = 16) {
    a = register_module("a", torch::nn::Linear(8, hidden));
    b = register_module("b", torch::nn::Linear(hidden, hidden));
    c = register_module("c", torch::nn::Linear(hidden, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    return c->forward(torch::relu(b->forward(torch::relu(a->forward(x)))));
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};

std::string params_text(torch::nn::Module& m) {
  std::ostringstream os;
  os.precision(9);
  for (const auto& p : m.parameters()) {
    auto flat = p.detach().cpu().flatten();
    for (int64_t i = 0; i < flat.numel(); ++i) os << flat[i].item<float>() << "\n";
  }
  return os.str();
}

struct TrainVariant {
  bool nosync = false;
  bool copy_grads = false;
  bool set_to_none = false;
  // What every rank does to the module's parameters halfway, after the wrapper exists.
  std::string replace;
  // Model and batches on the GPU: reduced by NCCL (one GPU per rank), or by gloo (ranks may
  // share a GPU). Empty: on the CPU.
  std::string cuda_backend;
};

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

// Rank 0 reports how a collective against a dead or silent peer ended.
void report(const std::string& out, const std::chrono::steady_clock::time_point start,
            const std::string& outcome) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_file(out + "/result", outcome + "\nseconds " + std::to_string(seconds) + "\n");
}

int peer_fault(const std::string& out, bool dies, const ddprun::ProcessGroupOptions& options) {
  ::signal(SIGTERM, SIG_IGN);  // ddprun stops the group when rank 1 dies: rank 0 reports first
  auto comm = ddprun::init_process_group(options);
  ddprun::barrier(*comm);
  if (comm->rank() == 1) {
    if (dies) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 is in all_reduce
      ::raise(SIGKILL);
    }
    while (!exists(out + "/result")) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 0;
  }
  auto t = torch::ones({1024});
  const auto start = std::chrono::steady_clock::now();
  try {
    // On a GPU an all_reduce returns before it completes (the stream waits, not the CPU);
    // barrier() blocks the CPU, bounded by the collective timeout.
    if (comm->device().is_cuda()) {
      ddprun::barrier(*comm);
    } else {
      ddprun::all_reduce(*comm, t);
    }
    report(out, start, "no error");
  } catch (const ddprun::CommError& e) {
    report(out, start, std::string("CommError: ") + e.what());
  } catch (const std::exception& e) {
    report(out, start, std::string("other exception: ") + e.what());
  }
  return 0;
}

int mismatch(const std::string& out) {
  auto comm = ddprun::init_process_group();
  auto net = std::make_shared<Net>(comm->rank() == 1 ? 12 : 16);
  try {
    ddprun::DistributedDataParallel ddp(net, comm);
    write_file(out + "/mismatch." + std::to_string(comm->rank()), "no error\n");
  } catch (const std::exception& e) {
    write_file(out + "/mismatch." + std::to_string(comm->rank()), std::string(e.what()) + "\n");
  }
  return 0;
}

// Rank 0 runs one backward pass more than the others in step 3: from there on the ranks'
// collective calls differ, which must end in a CommError naming both calls (through run_main,
// in the error file), not in a gloo abort or silently averaged garbage.
int extra_backward(int, char**) {
  auto comm = ddprun::init_process_group();
  auto net = std::make_shared<Net>();
  ddprun::DistributedDataParallel ddp(net, comm);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  const auto x = torch::randn({8, 8});
  const auto y = torch::randn({8, 4});
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    auto loss = torch::mse_loss(ddp.forward([&] { return net->forward(x); }), y);
    loss.backward();
    if (step == 3 && comm->rank() == 0) {
      torch::mse_loss(ddp.forward([&] { return net->forward(x); }), y).backward();
    }
    opt.step();
    auto l = loss.detach().clone();
    ddprun::reduce_mean(*comm, l);
  }
  return 0;
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
  {
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : net->parameters()) {
      p.copy_((torch::sin(torch::arange(p.numel(), torch::kFloat) * 0.7 + k) * 0.5).reshape(p.sizes()));
      ++k;
    }
  }
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
  for (int s = 0; s < steps; ++s) {
    const auto x = torch::cos(torch::arange(24, torch::kFloat) * 0.37 + (r * 1.3 + s * 0.11)).reshape({4, 6});
    const auto y = torch::sin(torch::arange(12, torch::kFloat) * 0.21 + (r * 0.9 + s * 0.05)).reshape({4, 3});
    opt.zero_grad();
    torch::mse_loss(ddp.forward([&] { return net->forward(x); }), y).backward();
    opt.step();
  }
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

int sampler() {
  int64_t n, w, seed, epoch, drop_last, shuffle;
  while (std::cin >> n >> w >> seed >> epoch >> drop_last >> shuffle) {
    for (int r = 0; r < w; ++r) {
      ddprun::SamplerSpec spec{n, static_cast<int>(w), r, shuffle != 0, static_cast<uint64_t>(seed), drop_last != 0};
      std::cout << n << " " << w << " " << seed << " " << epoch << " " << drop_last << " " << shuffle << " r" << r << ":";
      for (int64_t i : ddprun::distributed_indices(spec, epoch)) std::cout << " " << i;
      std::cout << "\n";
    }
  }
  return 0;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Two ranks, each with its own client of the store at MASTER_ADDR:MASTER_PORT, and keys of its
// own, so that the results do not depend on which rank runs first.
int store_ops(const std::string& out) {
  const ddprun::LaunchEnv env = ddprun::launch_env_from_process();
  expect(env.world_size == 2 && env.use_agent_store, "2 ranks using the launcher's store");
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(60);
  c10d::TCPStore store(env.master_addr, options);
  const std::string me = "r" + std::to_string(env.rank) + "/";
  const std::string peer = "r" + std::to_string(1 - env.rank) + "/";

  store.set(me + "hello", bytes_of("from " + me));
  store.wait({peer + "hello"});
  expect(text_of(store.get(peer + "hello")) == "from " + peer, "get the peer's key");
  expect(store.add(me + "n", 5) == 5 && store.add(me + "n", -2) == 3, "add");
  expect(text_of(store.get(me + "n")) == "3", "an added key reads as its decimal text");
  expect(text_of(store.compareSet(me + "n", bytes_of("3"), bytes_of("x"))) == "x", "compare_set swaps");
  expect(text_of(store.compareSet(me + "n", bytes_of("3"), bytes_of("y"))) == "x", "compare_set keeps");
  expect(text_of(store.compareSet(me + "new", {}, bytes_of("z"))) == "z", "compare_set creates");
  expect(store.check({me + "new", peer + "hello"}) && !store.check({me + "absent"}), "check");
  expect(store.deleteKey(me + "new") && !store.deleteKey(me + "new"), "delete_key");
  expect(store.getNumKeys() >= 3, "getNumKeys counts the keys");
  bool timed_out = false;
  try {
    store.wait({me + "absent"}, std::chrono::milliseconds(200));
  } catch (const c10::Error&) {
    timed_out = true;
  }
  expect(timed_out, "a wait for a missing key times out");
#if TORCH_VERSION_MAJOR >= 2
  store.append(me + "log", bytes_of("a"));
  store.append(me + "log", bytes_of("b"));
  store.multiSet({me + "m1", me + "m2"}, {bytes_of("1"), bytes_of("22")});
  const auto values = store.multiGet({me + "log", me + "m1", me + "m2"});
  expect(text_of(values.at(0)) == "ab" && text_of(values.at(1)) == "1" && text_of(values.at(2)) == "22", "append, multi");
  store.queuePush(peer + "q", bytes_of("for " + peer));
  expect(text_of(store.queuePop(me + "q", /*block=*/true)) == "for " + me, "queue_push, blocking queue_pop");
  expect(store.queueLen(me + "q") == 0, "queue_len");
  const auto keys = store.listKeys();
  expect(std::find(keys.begin(), keys.end(), me + "log") != keys.end(), "list_keys");
#else
  std::promise<std::string> changed;
  store.watchKey(me + "watched", [&changed](c10::optional<std::string> old_value, c10::optional<std::string> new_value) {
    changed.set_value((old_value ? *old_value : "-") + ">" + (new_value ? *new_value : "-"));
  });
  store.set(me + "watched", bytes_of("w"));
  auto change = changed.get_future();
  expect(change.wait_for(std::chrono::seconds(30)) == std::future_status::ready && change.get() == "->w", "watchKey");
#endif
  store.set(me + "done", bytes_of("1"));
  store.wait({peer + "done"});  // the peer's keys stay until it has read them
  write_file(out + "/store_ops." + std::to_string(env.rank), "ok");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "collectives" && argc == 3) return collectives(argv[2], {});
    if (mode == "collectives" && argc == 5) return collectives(argv[2], group_options(argv[3], argv[4]));
    if (mode == "cuda_devices" && argc == 2) {
#ifdef USE_C10D_NCCL
      const bool cuda_build = true;
#else
      const bool cuda_build = false;
#endif
      std::cout << (torch::cuda::is_available() ? torch::cuda::device_count() : 0) << " "
                << (cuda_build ? "cuda-build" : "cpu-build") << "\n";
      return 0;
    }
    if (mode == "train" && argc >= 6) {
      TrainVariant variant;
      for (int i = 6; i < argc; ++i) {
        const std::string word = argv[i];
        if (word == "nosync") variant.nosync = true;
        else if (word == "copy_grads") variant.copy_grads = true;
        else if (word == "set_to_none") variant.set_to_none = true;
        else if (word.rfind("replace=", 0) == 0) variant.replace = word.substr(8);
        else if (word == "cuda") variant.cuda_backend = "auto";
        else if (word == "cuda_gloo") variant.cuda_backend = "gloo";
        else die("unknown train variant: " + word);
      }
      return train(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), std::stoi(argv[5]), variant);
    }
    if (mode == "compare" && argc == 5) return compare(argv[2], argv[3], std::stod(argv[4]));
    if (mode == "peer_dies" && argc == 3) return peer_fault(argv[2], true, {});
    if (mode == "peer_hangs" && argc == 3) return peer_fault(argv[2], false, {});
    if (mode == "peer_hangs" && argc == 5) return peer_fault(argv[2], false, group_options(argv[3], argv[4]));
    if (mode == "mismatch" && argc == 3) return mismatch(argv[2]);
    if (mode == "sampler" && argc == 2) return sampler();
    if (mode == "hang" && argc == 4) return hang(argv[2], std::stoi(argv[3]));
    if (mode == "hooks" && argc == 5) return hooks(argv[2], argv[3], std::stoi(argv[4]));
    if (mode == "store_ops" && argc == 3) return store_ops(argv[2]);
    if (mode == "last_words" && argc == 2) {
      return ddprun::run_main(argc, argv, [](int, char**) -> int {
        std::printf("last words from printf\n");
        std::cout << "last words from std::cout\n";  // "\n", not std::endl: no explicit flush
        ::raise(SIGKILL);
        return 0;
      });
    }
    if (mode == "extra_backward" && argc == 2) return ddprun::run_main(argc, argv, extra_backward);
    if (mode == "resume" && (argc == 5 || (argc == 6 && std::string(argv[5]) == "LOAD"))) {
      return resume(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), argc == 6);
    }
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("usage: see the comment at the top of tests/worker/rank_driver.cpp");
}
