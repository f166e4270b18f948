// Per-step time of one model with DistributedDataParallel, with no gradient sync, and alone.
// scripts/bench/ddp.py starts it on the CPU with gloo (and scripts/bench/ddp_python_worker.py, the same
// measurement with PyTorch's Python DDP) and prints the table; scripts/bench/gpu.py starts both
// with --device cuda (NCCL).
//
// Models (--model): mlp, 4 Linear layers of 1024 with ReLU between, where the time goes to the
// matrix products and the 16 MiB all-reduce; many_small, 200 Linear layers of 64 with ReLU
// between, 400 small parameters (3.3 MB) where the per-parameter and per-operator work counts
// more than the all-reduce. Batch 64 per rank. A step is zero_grad, forward, MSE loss, backward
// (with the gradient sync in ddp mode) and an SGD step; on a GPU it ends with a device
// synchronize, so that the whole step is timed. Rank 0 prints two lines: "threads intra_op=<n>
// inter_op=<n> openmp=<n> mkl=<n|none> openblas=<n|none>" (what the process really uses) and
// "<mode> world=<W> steps=<n> median_ms=<m> mean_ms=<a> cpu_ms=<c>" (c: CPU time of all its
// threads per step).
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <numeric>
#include <optional>

#include "ddprun/collectives.hpp"
#include "ddprun/ddp.hpp"
#include "ddprun/error_file.hpp"
#include "ddprun/powersgd_hook.hpp"
#include "ddprun/process_group.hpp"
#include "bench_host.hpp"

namespace {

constexpr int64_t kBatch = 64;

struct ModelShape {
  int64_t width;
  int layers;
};

ModelShape model_shape(const std::string& name) {
  return name == "mlp" ? ModelShape{1024, 4} : ModelShape{64, 200};
}

// `layers` Linear layers of `width` with ReLU between, created in the same order as
// scripts/bench/ddp_python_worker.py's, so that seed 0 gives the same weights.
torch::nn::Sequential make_model(const ModelShape& shape) {
  torch::nn::Sequential net;
  for (int i = 0; i < shape.layers; ++i) {
    if (i > 0) net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Linear(shape.width, shape.width));
  }
  return net;
}

// CPU time of every thread of this process (compute, gloo's threads, the kernel on their behalf).
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

int run(int argc, char** argv) {
  std::string mode = "ddp";
  std::string model = "mlp";
  std::string device = "cpu";
  int steps = 50;
  int warmup = 5;
  ddprun::DdpOptions ddp_options;
  ddprun::ProcessGroupOptions pg_options;
  CLI::App app{"DDP step-time benchmark (see scripts/bench/ddp.py)"};
  app.add_option("--mode", mode, "ddp: DDP; nosync: no gradient sync; single: world size 1")
      ->check(CLI::IsMember({"ddp", "nosync", "single"}));
  app.add_option("--model", model, "mlp: 4 Linear of 1024; many_small: 200 Linear of 64")
      ->check(CLI::IsMember({"mlp", "many_small"}))
      ->capture_default_str();
  app.add_option("--device", device, "cpu (gloo) or cuda (the GPU LOCAL_RANK, NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--solo-when-alone", pg_options.solo_when_alone,
                 "world size 1 without a process group (false: a real one, as PyTorch has)")
      ->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--bucket-cap-mb", ddp_options.bucket_cap_mb, "DDP bucket cap (MiB)")
      ->capture_default_str();
  app.add_option("--first-bucket-cap-mb", ddp_options.first_bucket_cap_mb,
                 "DDP first bucket cap (MiB)")
      ->capture_default_str();
  app.add_option("--gradient-as-bucket-view", ddp_options.gradient_as_bucket_view,
                 "DDP: gradients are slices of the buckets (true/false)")
      ->capture_default_str();
  std::string hook = "none";
  app.add_option("--comm-hook", hook, "DDP communication hook: none, fp16, bf16 or powersgd (compression)")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd"}))
      ->capture_default_str();
  int powersgd_rank = 4;
  app.add_option("--powersgd-rank", powersgd_rank, "--comm-hook powersgd: matrix_approximation_rank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const bool cuda = device == "cuda";
  if (cuda) {
    if (const auto why = ddprun::bench::why_no_gpu()) {
      fmt::print(stderr, "bench_ddp: --device cuda: {}\n", *why);
      return ddprun::bench::kNoGpuExitCode;
    }
    pg_options.device = c10::kCUDA;
  }
  // Debian's 1.13 does not pass this on to OpenBLAS, which keeps a thread per core unless
  // OPENBLAS_NUM_THREADS=1 (scripts/bench/ddp.py sets it); the thread line shows what took effect.
  torch::set_num_threads(1);
  at::set_num_interop_threads(1);
  // 200 layers shrink the gradients of the first ones into denormals, whose arithmetic is slow
  // on x86 and would be timed instead of DDP; both sides flush them (no measurable change on mlp).
  at::globalContext().setFlushDenormal(true);
  const auto comm = ddprun::init_process_group(pg_options);
  torch::manual_seed(0);
  const ModelShape shape = model_shape(model);
  auto net = make_model(shape);
  net->to(comm->device());
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.01));
  std::optional<ddprun::DistributedDataParallel> ddp;
  if (mode == "ddp") ddp.emplace(net.ptr(), comm, ddp_options);
  // Bytes each rank hands to the all-reduces per step: the gradients, in the wire's dtype.
  // PowerSGD (from its 2nd step, so in the warm-up already): a matrix n x m sends P and Q,
  // (n + m) x rank floats, when that is at most half of it (min_compression_rate 2); a bias is an
  // n x 1 matrix, which never is.
  int64_t wire_bytes = 0;
  for (const auto& p : net->parameters()) {
    if (hook == "powersgd") {
      const int64_t n = p.size(0);
      const int64_t m = p.numel() / std::max<int64_t>(n, 1);
      const bool compressed = p.numel() >= 2 * (n + m) * powersgd_rank;
      wire_bytes += (compressed ? (n + m) * powersgd_rank : p.numel()) * p.element_size();
    } else {
      wire_bytes += p.numel() * (hook == "none" ? p.element_size() : 2);
    }
  }
  if (ddp && hook == "fp16") ddp->register_comm_hook(ddprun::fp16_compress_hook());
  if (ddp && hook == "bf16") ddp->register_comm_hook(ddprun::bf16_compress_hook());
  if (ddp && hook == "powersgd") {
    ddprun::PowerSGDOptions o;
    o.matrix_approximation_rank = powersgd_rank;
    o.start_powerSGD_iter = 2;
    ddp->register_comm_hook(ddprun::powerSGD_hook(std::make_shared<ddprun::PowerSGDState>(o)));
  }

  torch::manual_seed(1 + comm->rank());
  const auto x = torch::randn({kBatch, shape.width}).to(comm->device());
  const auto y = torch::randn({kBatch, shape.width}).to(comm->device());
  auto step = [&] {
    optimizer.zero_grad();
    const auto out = ddp ? ddp->forward([&] { return net->forward(x); }) : net->forward(x);
    torch::nn::functional::mse_loss(out, y).backward();
    optimizer.step();
    if (cuda) torch::cuda::synchronize();
  };

  for (int i = 0; i < warmup; ++i) step();
  ddprun::barrier(*comm);
  std::vector<double> ms;
  const double cpu0 = process_cpu_ms();
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu_per_step = (process_cpu_ms() - cpu0) / steps;
  ddprun::barrier(*comm);
  if (comm->rank() == 0) {
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
    fmt::print("{}\n", ddprun::bench::thread_line());
    fmt::print("{} world={} steps={} median_ms={:.3f} mean_ms={:.3f} cpu_ms={:.3f}", mode,
               comm->size(), steps, median, mean, cpu_per_step);
    if (ddp) fmt::print(" comm_hook={} allreduce_bytes={}", hook, wire_bytes);
    fmt::print("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddprun::run_main(argc, argv, run); }
