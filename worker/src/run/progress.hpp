// The library's side of the progress record (ddprun/progress_record.hpp): which collective this
// rank is in. Steps are counted by ddprun::step() (heartbeat.hpp), which DistributedDataParallel
// calls after each synchronised backward pass.
#pragma once

namespace ddprun::detail {

// While one lives, the rank is inside its next collective, `name` (a name without spaces, as
// torch.distributed's: all_reduce, barrier, ddp_backward). Its construction beats. Only the
// outermost counts: a collective made of others (broadcast_tensors) is one.
class CollectiveProgress {
 public:
  explicit CollectiveProgress(const char* name) noexcept;
  ~CollectiveProgress();
  CollectiveProgress(const CollectiveProgress&) = delete;
  CollectiveProgress& operator=(const CollectiveProgress&) = delete;

 private:
  bool counted_ = false;
};

}  // namespace ddprun::detail
