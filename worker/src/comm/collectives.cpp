#include "ddprun/collectives.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "c10d_comm.hpp"
#include "run/progress.hpp"

namespace ddprun {
namespace {

// Every collective starts with one: a beat and the progress record's "inside it" (this rank
// reached it), then the agreement check, until the collective returns.
class Collective {
 public:
  Collective(Comm& comm, const CollectiveCall& call) : progress_(detail::kind_name(call.kind)) {
    comm.check_agreement(call);
  }

 private:
  detail::CollectiveProgress progress_;
};

}  // namespace

void all_reduce(Comm& comm, at::Tensor& tensor, ReduceOp op) {
  const Collective collective(comm, {CollectiveKind::kAllReduce, tensor.numel(), tensor.scalar_type(), static_cast<int64_t>(op)});
  at::Tensor flat = tensor.contiguous();
  comm.start_all_reduce(flat, op)->wait();
  if (!flat.is_same(tensor)) {
    at::NoGradGuard no_grad;
    tensor.copy_(flat);
  }
}

void reduce_mean(Comm& comm, at::Tensor& tensor) {
  TORCH_CHECK(at::isFloatingType(tensor.scalar_type()),
              "reduce_mean needs a floating-point tensor, got ", tensor.scalar_type());
  {
    at::NoGradGuard no_grad;
    tensor.div_(comm.size());
  }
  all_reduce(comm, tensor, ReduceOp::kSum);
}

void broadcast(Comm& comm, at::Tensor& tensor, int root) {
  const Collective collective(comm, {CollectiveKind::kBroadcast, tensor.numel(), tensor.scalar_type(), root});
  at::Tensor flat = tensor.contiguous();
  comm.broadcast(flat, root);
  if (!flat.is_same(tensor)) {
    at::NoGradGuard no_grad;
    tensor.copy_(flat);
  }
}

void broadcast_tensors(Comm& comm, const std::vector<at::Tensor>& tensors, int root,
                       std::size_t chunk_bytes) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  const Collective collective(comm, {CollectiveKind::kBroadcastTensors, total, c10::ScalarType::Undefined, root});
  at::NoGradGuard no_grad;
  // Group by dtype, keeping the given order inside each group so that every rank packs the
  // same tensors into the same chunks.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);

  const bool is_root = comm.rank() == root;
  for (auto& [dtype, group] : by_dtype) {
    std::size_t begin = 0;
    while (begin < group.size()) {
      std::size_t end = begin;
      std::size_t bytes = 0;
      int64_t numel = 0;
      while (end < group.size() &&
             (end == begin || bytes + group[end].nbytes() <= chunk_bytes)) {
        bytes += group[end].nbytes();
        numel += group[end].numel();
        ++end;
      }
      at::Tensor flat;
      if (is_root) {
        std::vector<at::Tensor> pieces;
        for (std::size_t i = begin; i < end; ++i) pieces.push_back(group[i].reshape({-1}));
        flat = at::cat(pieces);
      } else {
        flat = at::empty({numel}, group[begin].options());
      }
      comm.broadcast(flat, root);
      if (!is_root) {
        int64_t offset = 0;
        for (std::size_t i = begin; i < end; ++i) {
          auto& t = group[i];
          t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
      }
      begin = end;
    }
  }
}

std::vector<at::Tensor> all_gather(Comm& comm, const at::Tensor& tensor) {
  const Collective collective(comm, {CollectiveKind::kAllGather, tensor.numel(), tensor.scalar_type(), 0});
  return comm.all_gather(tensor.contiguous());
}

std::vector<std::string> all_gather_bytes(Comm& comm, std::string_view bytes) {
  const Collective collective(comm, {CollectiveKind::kAllGatherBytes});
  const auto on_device = at::TensorOptions().device(comm.device());
  const auto lengths_t =
      comm.all_gather(at::tensor({static_cast<int64_t>(bytes.size())}, on_device.dtype(at::kLong)));
  std::vector<int64_t> lengths;
  for (const auto& l : lengths_t) lengths.push_back(l.cpu().item<int64_t>());
  // gloo cannot gather empty tensors; pad every payload to the longest, at least one byte.
  const int64_t width = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));

  at::Tensor mine = at::zeros({width}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
  const auto gathered = comm.all_gather(mine.to(comm.device()));

  std::vector<std::string> out;
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    const at::Tensor cpu = gathered[r].cpu();
    out.emplace_back(static_cast<const char*>(cpu.data_ptr()), static_cast<std::size_t>(lengths[r]));
  }
  return out;
}

void barrier(Comm& comm) {
  const Collective collective(comm, {CollectiveKind::kBarrier});
  comm.barrier();
}

}  // namespace ddprun
