// The pieces of rank_driver (usage at the top of rank_driver.cpp) shared by its files: the
// checks and files every scenario uses, the model most of them train, and the scenarios, each
// in the file of its theme (rank_driver_training.cpp, rank_driver_faults.cpp).
#pragma once

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

namespace rank_driver {

using ddprun::Comm;

[[noreturn]] void die(const std::string& what);
void expect(bool ok, const std::string& what);
// Written whole: to a temporary file, then renamed.
void write_file(const std::string& path, const std::string& text);
bool exists(const std::string& path);
// DEVICE and BACKEND as on the command line: "cpu"/"cuda" and "auto"/"gloo"/"nccl". On cuda the
// process group is a real one even at world size 1, so that a backend can be tested on one GPU.
ddprun::ProcessGroupOptions group_options(const std::string& device, const std::string& backend);

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

std::string params_text(torch::nn::Module& m);

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

// The scenarios, as rank_driver.cpp's usage describes them.
int collectives(const std::string& out, const ddprun::ProcessGroupOptions& options);
int train(const std::string& out, int total, int batch, int steps, TrainVariant variant);
int compare(const std::string& a, const std::string& b, double tolerance);
int peer_fault(const std::string& out, bool dies, const ddprun::ProcessGroupOptions& options);
int mismatch(const std::string& out);
int extra_backward(int, char**);
int resume(const std::string& out, int steps, int save_at, bool load);
int hooks(const std::string& out, const std::string& hook, int steps);
int hang(const std::string& out, int hang_at);
int sampler();
int store_ops(const std::string& out);

}  // namespace rank_driver
