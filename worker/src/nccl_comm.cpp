// The NCCL communicator: CUDA tensors, one GPU per local rank. Compiled only against a CUDA
// build of libtorch (the torch_cuda target defines USE_C10D_NCCL). Written to the 2.x headers
// (see ../shared notes, libtorch-c10d.md section 7) but not yet compiled or run: issue 6 lists
// the checks that remain for a GPU machine.
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "backends.hpp"
#include "c10d_comm.hpp"

namespace ddprun::detail {
namespace {

class NcclComm : public C10dComm {
 public:
  using C10dComm::C10dComm;

 protected:
  // WorkNCCL::wait() makes the current CUDA stream wait for the collective, without blocking
  // the CPU; NCCL's own watchdog enforces the timeout given to the process group.
  void wait_work(c10d::Work& work) override { work.wait(); }
};

}  // namespace

std::shared_ptr<Comm> make_nccl_comm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, int local_rank, std::chrono::milliseconds timeout) {
  const auto device = static_cast<c10::DeviceIndex>(local_rank);
  c10::cuda::set_device(device);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return std::make_shared<NcclComm>(std::move(pg), rank, size, c10::Device(c10::kCUDA, device),
                                    timeout, "nccl");
}

}  // namespace ddprun::detail
