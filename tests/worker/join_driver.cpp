// One rank of tests/worker/join_test.sh, started by ddprun: Join (uneven inputs) and static_graph
// against PyTorch's own DDP. Models, weights and batches come from formulas that
// join_reference.py repeats in Python; OUT/params.<rank> holds the parameters and buffers
// (%.9g, one a line), the format of `rank_driver compare`.
//
//   join_driver uneven OUT STEPS0 STEPS1 initial|active [fp16|bf16|powersgd|static]
//                        rank r trains STEPS<r> batches inside a Join; gradients divided by the
//                        initial world size or by the ranks still training; with a compression
//                        hook (which the joined rank runs on zeros, as PyTorch's: PowerSGD at
//                        rank 1 from iteration 2), or static_graph
//   join_driver throw OUT STEPS0 STEPS1
//                        the same with throw_on_early_termination; OUT/thrown.<rank> says where
//                        the rank threw ("step N" or "finish") and the message
//   join_driver throw_at_scope_end OUT STEPS0 STEPS1
//                        the same without calling finish(): the Join's destructor must report the
//                        exception and end the process (it cannot throw)
//   join_driver api      (alone, world size 1) the Join's argument checks, and a solo Join
//   join_driver static OUT STEPS static|plain
//                        a model with an unused layer and a layer used twice, once inside a
//                        reentrant (checkpointed) backward; static: DdpOptions::static_graph;
//                        plain: without it, where the second gradient must be refused
//                        (OUT/error.<rank>)
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include "ddprun/ddp.hpp"
#include "ddprun/join.hpp"
#include "ddprun/powersgd_hook.hpp"
#include "ddprun/process_group.hpp"
#include "driver_formulas.hpp"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::cerr << "join_driver: " << what << "\n";
  std::exit(1);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

std::string state_text(torch::nn::Module& m) {
  std::ostringstream os;
  os.precision(9);
  const auto add = [&](const torch::Tensor& t) {
    auto flat = t.detach().cpu().to(torch::kDouble).flatten();
    for (int64_t i = 0; i < flat.numel(); ++i) os << static_cast<float>(flat[i].item<double>()) << "\n";
  };
  for (const auto& p : m.parameters()) add(p);
  for (const auto& b : m.buffers()) add(b);
  return os.str();
}

// Linear, BatchNorm (buffers: broadcast from a training rank under Join), Tanh, Linear.
int uneven(const std::string& out, int steps, bool divide_by_initial, bool throw_early,
           bool call_finish = true, const std::string& hook = "") {
  auto comm = ddprun::init_process_group();
  const int r = comm->rank();
  auto net = torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::BatchNorm1d(5), torch::nn::Tanh(),
                                   torch::nn::Linear(5, 3));
  driver_formulas::init_weights(*net);
  ddprun::DdpOptions ddp_options;
  ddp_options.static_graph = hook == "static";
  ddprun::DistributedDataParallel ddp(net.ptr(), comm, ddp_options);
  if (hook == "fp16") ddp.register_comm_hook(ddprun::fp16_compress_hook());
  if (hook == "bf16") ddp.register_comm_hook(ddprun::bf16_compress_hook());
  if (hook == "powersgd") {
    ddprun::PowerSGDOptions o;
    o.matrix_approximation_rank = 1;
    o.start_powerSGD_iter = 2;
    ddp.register_comm_hook(ddprun::powerSGD_hook(std::make_shared<ddprun::PowerSGDState>(o)));
  }
  torch::optim::SGD opt(net->parameters(), 0.1);
  ddprun::JoinOptions options;
  options.divide_by_initial_world_size = divide_by_initial;
  options.throw_on_early_termination = throw_early;
  std::string where = "finish";
  try {
    ddprun::Join join({&ddp}, options);
    for (int s = 0; s < steps; ++s) {
      where = "step " + std::to_string(s);
      driver_formulas::step(ddp, net, opt, r, s, 6, 3);
    }
    where = "finish";
    if (call_finish) join.finish();
    if (throw_early) write_file(out + "/thrown." + std::to_string(r), "no exception\n");
  } catch (const std::runtime_error& e) {
    if (!throw_early) throw;
    write_file(out + "/thrown." + std::to_string(r), where + "\n" + e.what() + "\n");
  }
  write_file(out + "/params." + std::to_string(r), state_text(*net));
  return 0;
}

struct StaticNet;

// PyTorch's reentrant activation checkpointing (torch.utils.checkpoint, use_reentrant=True) of
// StaticNet::tail: forward without a graph, and in backward the tail runs again and a nested
// backward pass takes the gradients through it, into its parameters.
struct Checkpointed : torch::autograd::Function<Checkpointed> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, StaticNet* net);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

// `s` is applied twice, the second time in the checkpointed tail, which also holds the output
// layer: its parameters get two gradients in one backward pass, one from the nested backward,
// and the first gradients of every pass come from there. `unused` never takes part.
struct StaticNet : torch::nn::Module {
  StaticNet() {
    a = register_module("a", torch::nn::Linear(6, 5));
    s = register_module("s", torch::nn::Linear(5, 5));
    unused = register_module("unused", torch::nn::Linear(5, 5));
    head = register_module("head", torch::nn::Linear(5, 3));
  }
  torch::Tensor tail(torch::Tensor h) { return head->forward(torch::tanh(s->forward(h))); }
  torch::Tensor forward(torch::Tensor x) {
    return Checkpointed::apply(torch::tanh(s->forward(torch::tanh(a->forward(x)))), this);
  }
  torch::nn::Linear a{nullptr}, s{nullptr}, unused{nullptr}, head{nullptr};
};

torch::Tensor Checkpointed::forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, StaticNet* net) {
  ctx->saved_data["net"] = reinterpret_cast<int64_t>(net);
  ctx->save_for_backward({x});
  return net->tail(x);
}

torch::autograd::variable_list Checkpointed::backward(torch::autograd::AutogradContext* ctx,
                                                      torch::autograd::variable_list grads) {
  auto* net = reinterpret_cast<StaticNet*>(ctx->saved_data["net"].toInt());
  auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
  torch::Tensor y;
  {
    torch::AutoGradMode enable(true);
    y = net->tail(x);
  }
  torch::autograd::backward({y}, {grads[0]});
  return {x.grad(), torch::Tensor()};
}

void expect_invalid(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const std::invalid_argument&) {
    return;
  }
  die(what + " was accepted");
}

int api() {
  auto comm = ddprun::init_process_group();
  auto net = torch::nn::Linear(2, 1);
  ddprun::DistributedDataParallel ddp(net.ptr(), comm);
  expect_invalid([] { ddprun::Join join({}); }, "a Join of no joinables");
  expect_invalid([] { ddprun::Join join({nullptr}); }, "a null joinable");
  {
    ddprun::Join join({&ddp});
    expect_invalid([&] { ddprun::Join again({&ddp}); }, "a joinable in two Joins");
    ddp.forward([&] { return net->forward(torch::ones({1, 2})); }).sum().backward();
    join.finish();
    join.finish();  // a second call does nothing
  }
  ddprun::Join after({&ddp});  // free again once the first Join has finished
  std::cout << "api ok\n";
  return 0;
}

int static_graph(const std::string& out, int steps, bool is_static) {
  auto comm = ddprun::init_process_group();
  const int r = comm->rank();
  auto net = std::make_shared<StaticNet>();
  driver_formulas::init_weights(*net);
  ddprun::DdpOptions options;
  options.static_graph = is_static;
  ddprun::DistributedDataParallel ddp(net, comm, options);
  torch::optim::SGD opt(net->parameters(), 0.1);
  try {
    for (int s = 0; s < steps; ++s) driver_formulas::step(ddp, net, opt, r, s, 6, 3);
  } catch (const std::runtime_error& e) {
    if (is_static) throw;
    write_file(out + "/error." + std::to_string(r), std::string(e.what()) + "\n");
    return 0;
  }
  if (!is_static) die("a parameter with two gradients in one backward pass was accepted without static_graph");
  if (net->unused->weight.grad().defined()) die("the parameter no rank used has a gradient");
  write_file(out + "/params." + std::to_string(r), state_text(*net));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    const auto rank_steps = [&](int first) {
      const char* rank = std::getenv("RANK");
      return std::stoi(argv[first + (rank && std::string(rank) == "1" ? 1 : 0)]);
    };
    if (mode == "uneven" && (argc == 6 || argc == 7)) {
      const std::string divide = argv[5];
      if (divide != "initial" && divide != "active") die("initial or active, not " + divide);
      const std::string hook = argc == 7 ? argv[6] : "";
      if (!hook.empty() && hook != "fp16" && hook != "bf16" && hook != "powersgd" && hook != "static") {
        die("fp16, bf16, powersgd or static, not " + hook);
      }
      return uneven(argv[2], rank_steps(3), divide == "initial", false, true, hook);
    }
    if (mode == "throw" && argc == 5) return uneven(argv[2], rank_steps(3), true, true);
    if (mode == "throw_at_scope_end" && argc == 5) return uneven(argv[2], rank_steps(3), true, true, false);
    if (mode == "api" && argc == 2) return api();
    if (mode == "static" && argc == 5) {
      const std::string kind = argv[4];
      if (kind != "static" && kind != "plain") die("static or plain, not " + kind);
      return static_graph(argv[2], std::stoi(argv[3]), kind == "static");
    }
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("usage: see the comment at the top of tests/worker/join_driver.cpp");
}
