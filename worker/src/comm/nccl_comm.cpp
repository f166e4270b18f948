// The NCCL communicator: CUDA tensors, one GPU per local rank. Compiled only against a CUDA
// build of libtorch (the torch_cuda target defines USE_C10D_NCCL): PyTorch 2.x from PyPI in
// build-torch2/. Its tests carry the CTest label gpu and skip without a GPU.
//
// Collective agreement checks (Comm::check_agreement) are off here: they would make the CPU
// wait for the GPU before every backward pass. NCCL does not abort on mismatched calls; they
// hang until the collective timeout, which the process group's watchdog enforces.
#include <c10/cuda/CUDAFunctions.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "backends.hpp"
#include "c10d_comm.hpp"
#include "nccl_env.hpp"

namespace ddprun::detail {
namespace {

class NcclComm : public C10dComm {
 public:
  using C10dComm::C10dComm;

 protected:
  // Without a timeout, WorkNCCL::wait() makes the current CUDA stream wait for the collective
  // and returns at once, so DDP's buckets never stall the CPU's run-ahead; a bucket that never
  // completes is reported by the process group's watchdog after the timeout given to it. With
  // one, it blocks the CPU until the collective completes and throws at the timeout: the
  // blocking collectives (broadcast, all_gather, barrier) report a stuck peer as a CommError.
  void wait_work(c10d::Work& work, bool block_cpu) override {
    if (block_cpu) {
      work.wait(timeout());
    } else {
      work.wait();
    }
  }
};

}  // namespace

std::shared_ptr<Comm> make_nccl_comm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, int local_rank, std::chrono::milliseconds timeout) {
  const auto device = static_cast<c10::DeviceIndex>(local_rank);
  c10::cuda::set_device(device);
  use_nccl_async_error_handling_of(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return std::make_shared<NcclComm>(std::move(pg), rank, size, c10::Device(c10::kCUDA, device),
                                    timeout, "nccl", /*check_collectives=*/false);
}

}  // namespace ddprun::detail
