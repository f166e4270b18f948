// Time of one NCCL all-reduce of a device buffer through the worker library
// (ddprun::all_reduce on an NCCL communicator), for buffers of --min-mib to --max-mib MiB,
// doubling. scripts/bench/gpu.py runs it under ddprun next to scripts/bench/allreduce_python_worker.py (the
// same loop with torch.distributed) and prints the table; not a test.
//
// World size 1 gets a real NCCL process group (ProcessGroupOptions::solo_when_alone = false),
// as torch.distributed has one. For each size every rank runs --warmup all-reduces, then
// synchronizes the device, runs --iters all-reduces and synchronizes again; rank 0 prints
// "allreduce bytes=<b> iters=<n> time_us=<t>", t the mean time of one all-reduce.
//
// A build against a libtorch without CUDA (Debian's 1.13) compiles the same code, and says at
// start-up that it cannot run (exit status 2).
#include <torch/cuda.h>
#include <torch/types.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>

#include "ddprun/collectives.hpp"
#include "ddprun/error_file.hpp"
#include "ddprun/process_group.hpp"
#include "bench_host.hpp"

namespace {

int run(int argc, char** argv) {
  int64_t min_mib = 1;
  int64_t max_mib = 1024;
  int iters = 20;
  int warmup = 5;
  CLI::App app{"NCCL all-reduce time on device buffers (see scripts/bench/gpu.py)"};
  app.add_option("--min-mib", min_mib, "smallest buffer (MiB)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-mib", max_mib, "largest buffer (MiB)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--iters", iters, "timed all-reduces per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed all-reduces per size first")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (const auto why = ddprun::bench::why_no_gpu()) {
    fmt::print(stderr, "bench_allreduce: {}\n", *why);
    return ddprun::bench::kNoGpuExitCode;
  }

  ddprun::ProcessGroupOptions options;
  options.device = c10::kCUDA;
  options.backend = ddprun::Backend::kNccl;
  options.solo_when_alone = false;
  const auto comm = ddprun::init_process_group(options);
  if (comm->rank() == 0) {
    fmt::print("backend={} world={} device={}\n", comm->backend(), comm->size(),
               comm->device().str());
  }
  for (int64_t mib = min_mib; mib <= max_mib; mib *= 2) {
    const int64_t bytes = mib << 20;
    auto buffer = torch::zeros({bytes / static_cast<int64_t>(sizeof(float))},
                              torch::TensorOptions().dtype(torch::kFloat32).device(comm->device()));
    for (int i = 0; i < warmup; ++i) ddprun::all_reduce(*comm, buffer);
    torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) ddprun::all_reduce(*comm, buffer);
    torch::cuda::synchronize();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        iters;
    if (comm->rank() == 0) {
      fmt::print("allreduce bytes={} iters={} time_us={:.2f}\n", bytes, iters, us);
    }
  }
  ddprun::barrier(*comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddprun::run_main(argc, argv, run); }
