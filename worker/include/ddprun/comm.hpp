// A communicator: this process's link to the other ranks of the job, and the narrow set of
// collectives the rest of the library is built on.
//
// Implementations: gloo for CPU tensors (gloo_comm.cpp), NCCL for CUDA tensors
// (nccl_comm.cpp, only in CUDA builds of libtorch), and a solo communicator for world size 1
// that opens no sockets. init_process_group() (process_group.hpp) picks one.
//
// Every primitive takes exactly one contiguous tensor, on device(): gloo reduces all the
// tensors of one call together, so passing several would silently mix them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddprun/export.hpp"

namespace ddprun {

enum class ReduceOp { kSum, kMin, kMax };

// The calls that ranks must agree on, for Comm::check_agreement.
enum class CollectiveKind {
  kAllReduce,
  kBroadcast,
  kBroadcastTensors,
  kAllGather,
  kAllGatherBytes,
  kBarrier,
  // One synchronised backward pass of DistributedDataParallel: all of its buckets' all-reduces.
  kDdpBackward,
};

// One collective call as every rank must make it at the same point of its sequence.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  // Elements each rank contributes (DDP backward: in all of its buckets).
  int64_t numel = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  // all_reduce: the ReduceOp; broadcasts: the root; DDP backward: the number of buckets.
  int64_t detail = 0;
};

// "all_reduce (sum) of 12 float elements", for error messages.
DDPRUN_API std::string describe(const CollectiveCall& call);

// A collective failed: a peer died or closed its connection, a peer did not take part within
// the collective timeout, or an earlier collective on the same communicator already failed.
// The message names the operation, the rank and the timeout.
class DDPRUN_API CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective in flight. wait() must be called before the tensor it works on is read.
class DDPRUN_API PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Blocks until the collective has completed on this rank (on NCCL: until the current CUDA
  // stream is ordered after it). Throws CommError on failure or after the collective timeout.
  virtual void wait() = 0;
};

class DDPRUN_API Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl" or "solo".
  virtual std::string backend() const = 0;
  // Where the tensors given to the collectives must live.
  virtual c10::Device device() const = 0;
  // The collective timeout this communicator enforces (Timeouts::collective).
  virtual std::chrono::milliseconds timeout() const = 0;

  // Starts reducing `flat` in place across all ranks; every rank must start the same sequence
  // of collectives with tensors of the same size and dtype.
  virtual std::unique_ptr<PendingOp> start_all_reduce(at::Tensor flat, ReduceOp op) = 0;
  // Overwrites `flat` on every rank with its value on `root`. Blocking.
  virtual void broadcast(at::Tensor flat, int root) = 0;
  // Returns every rank's `flat`, indexed by rank; all must have the same size. Blocking.
  virtual std::vector<at::Tensor> all_gather(const at::Tensor& flat) = 0;
  // Returns once every rank has called barrier(). Blocking.
  virtual void barrier() = 0;

  // Collective. Checks that every rank is about to make the same `call`; throws CommError
  // naming each rank's call when they differ, and the communicator refuses further work.
  // The library's collectives (collectives.hpp) and DDP's backward pass call it before they
  // start, so a rank that runs one backward() or reduce_mean() more than the others gets an
  // error that says so, instead of gloo aborting the process on mismatched sizes or silently
  // mixing unrelated data. The primitives above do not call it. A no-op where checks are off
  // (ProcessGroupOptions::check_collectives), on NCCL, and at world size 1.
  virtual void check_agreement(const CollectiveCall& call) = 0;

  // False once a collective has failed. A gloo process group cannot be used after an error
  // (later calls would fail or re-raise the old error), so every later call throws CommError
  // at once, quoting the first failure.
  virtual bool healthy() const = 0;
};

}  // namespace ddprun
