// The communicator factories init_process_group() chooses from, one source file each.
#pragma once

#include <chrono>
#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ddprun/comm.hpp"

namespace ddprun::detail {

// World size 1: every collective is the identity, no sockets are opened.
std::shared_ptr<Comm> make_solo_comm(c10::Device device, std::chrono::milliseconds timeout);

// A gloo process group over `store`, for tensors on `device` (CPU; or a GPU in CUDA builds,
// which lets several ranks share one GPU). Throws what c10d throws if the other ranks do not
// join within the store's timeout.
std::shared_ptr<Comm> make_gloo_comm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, c10::Device device, std::chrono::milliseconds timeout,
                                     bool check_collectives);

#ifdef USE_C10D_NCCL
// An NCCL process group over `store`, for tensors on GPU `local_rank` (made current).
std::shared_ptr<Comm> make_nccl_comm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, int local_rank, std::chrono::milliseconds timeout);
#endif

}  // namespace ddprun::detail
