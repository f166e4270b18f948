// What the machine gives a benchmark program: the thread counts it really runs with, and
// whether it can use a GPU. Shared by the programs in worker/bench/; not part of the library.
#pragma once

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <fmt/format.h>

#include <optional>
#include <string>

namespace ddprun::bench {

// "threads intra_op=<n> inter_op=<n> openmp=<n> mkl=<n|none> openblas=<n|none>", the line
// scripts/bench/ddp_python_worker.py prints for PyTorch: the OpenMP and MKL counts as libtorch reports them
// (at::get_parallel_info, which Python's torch.__config__.parallel_info() returns too), the
// OpenBLAS one from OpenBLAS itself when this process loaded it (Debian's libtorch does).
inline std::string thread_line() {
  const std::string info = at::get_parallel_info();
  auto reported = [&](const std::string& name) -> std::string {
    const std::string key = name + "() : ";
    const auto at = info.find(key);
    if (at == std::string::npos) return "none";
    const auto begin = at + key.size();
    return info.substr(begin, info.find_first_not_of("0123456789", begin) - begin);
  };
  std::string openblas = "none";
  using GetThreads = int (*)();
  if (auto* get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) {
    openblas = std::to_string(get());
  }
  return fmt::format("threads intra_op={} inter_op={} openmp={} mkl={} openblas={}",
                     at::get_num_threads(), at::get_num_interop_threads(),
                     reported("omp_get_max_threads"), reported("mkl_get_max_threads"), openblas);
}

// Why this program cannot run on a GPU with NCCL, or nothing when it can: this libtorch was
// built without CUDA and NCCL (Debian's 1.13), or it has them but sees no GPU.
inline std::optional<std::string> why_no_gpu() {
#ifndef USE_C10D_NCCL
  return fmt::format(
      "this program is built against libtorch {} without NCCL (a build without CUDA, like "
      "Debian's); build it against a CUDA libtorch: scripts/build.sh --torch2",
      TORCH_VERSION);
#else
  if (!torch::cuda::is_available()) {
    return fmt::format("libtorch {} has CUDA but sees no GPU (torch::cuda::device_count() is 0)",
                       TORCH_VERSION);
  }
  return std::nullopt;
#endif
}

// The exit status of a benchmark asked to run on a GPU it cannot use.
inline constexpr int kNoGpuExitCode = 2;

}  // namespace ddprun::bench
